#include "engine/cuda/shapes.h"

#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cuda {

StridedIndex strided_index(const Shape& shape, const std::vector<std::vector<int64_t>>& strides) {
  StridedIndex index;
  if (strides.size() > static_cast<size_t>(StridedIndex::kMaxOperands)) {
    throw Error("cuda backend: " + std::to_string(strides.size()) + " operands exceed the " +
                std::to_string(StridedIndex::kMaxOperands) + " a strided kernel takes");
  }
  index.operands = static_cast<int>(strides.size());
  index.total = num_elements(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = index.rank > 0;
    for (int k = 0; merge && k < index.operands; ++k) {
      merge = index.strides[k][index.rank - 1] == strides[k][d] * shape[d];
    }
    if (merge) {
      index.sizes[index.rank - 1] *= shape[d];
      for (int k = 0; k < index.operands; ++k) index.strides[k][index.rank - 1] = strides[k][d];
      continue;
    }
    if (index.rank == StridedIndex::kMaxDims) {
      throw Error("cuda backend: the index space " + shape_string(shape) + " keeps more than " +
                  std::to_string(StridedIndex::kMaxDims) + " dimensions after merging");
    }
    index.sizes[index.rank] = shape[d];
    for (int k = 0; k < index.operands; ++k) index.strides[k][index.rank] = strides[k][d];
    ++index.rank;
  }
  return index;
}

StridedIndex broadcast_index(const Shape& out, const std::vector<Shape>& inputs) {
  std::vector<std::vector<int64_t>> strides = {cpu::contiguous_strides(out)};
  for (const Shape& input : inputs) strides.push_back(cpu::broadcast_strides(input, out));
  return strided_index(out, strides);
}

ReducePlan reduce_plan(cpu::ReduceFormula reduction, const Shape& x, const Shape& kept,
                       double scale) {
  const std::vector<int64_t> x_strides = cpu::contiguous_strides(x);
  Shape group(x.size(), 1);
  std::vector<int64_t> kept_strides(x.size(), 0);
  for (size_t d = 0; d < x.size(); ++d) {
    if (kept[d] == 1) {
      group[d] = x[d];
    } else {
      kept_strides[d] = x_strides[d];
    }
  }
  ReducePlan plan;
  plan.reduction = reduction;
  plan.scale = scale;
  plan.outputs = strided_index(kept, {kept_strides});
  plan.group = strided_index(group, {x_strides});
  plan.chunks = reduce_chunks(plan.outputs.total, plan.group.total);
  return plan;
}

}  // namespace piper::engine::cuda
