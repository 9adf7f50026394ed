#include "engine/cpu/strided_loop.h"

#include <algorithm>

#include "formats/error.h"

namespace piper::engine::cpu {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * shape[i];
  }
  return strides;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) {
    return false;
  }
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[lead + i]) {
      return false;
    }
  }
  return true;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw Error("shapes " + shape_string(a) + " and " + shape_string(b) +
                  " do not broadcast (dimension " + std::to_string(i) + ": " + std::to_string(da) +
                  " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& from, const Shape& to) {
  const std::vector<int64_t> own = contiguous_strides(from);
  std::vector<int64_t> strides(to.size(), 0);
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    strides[lead + i] = from[i] == 1 ? 0 : own[i];
  }
  return strides;
}

StridedLoop::StridedLoop(const Shape& shape,
                         const std::vector<std::vector<int64_t>>& operand_strides,
                         std::vector<int64_t> bases)
    : operands_(operand_strides.size()), total_(num_elements(shape)), bases_(std::move(bases)) {
  bases_.resize(operands_, 0);
  // Keep dimensions larger than 1, then merge neighbours that are contiguous for every operand.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(operands_);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) {
      continue;
    }
    const bool merge = !dims.empty() && [&] {
      for (size_t k = 0; k < operands_; ++k) {
        if (strides[k].back() != operand_strides[k][d] * shape[d]) {
          return false;
        }
      }
      return true;
    }();
    if (merge) {
      dims.back() *= shape[d];
      for (size_t k = 0; k < operands_; ++k) {
        strides[k].back() = operand_strides[k][d];
      }
    } else {
      dims.push_back(shape[d]);
      for (size_t k = 0; k < operands_; ++k) {
        strides[k].push_back(operand_strides[k][d]);
      }
    }
  }
  inner_strides_.assign(operands_, 0);
  if (dims.empty()) {
    inner_ = 1;
  } else {
    inner_ = dims.back();
    dims.pop_back();
    for (size_t k = 0; k < operands_; ++k) {
      inner_strides_[k] = strides[k].back();
      strides[k].pop_back();
    }
  }
  outer_dims_ = std::move(dims);
  outer_strides_ = std::move(strides);
}

std::vector<StridedLoop> slab_loops(const Shape& shape,
                                    const std::vector<std::vector<int64_t>>& operand_strides,
                                    size_t dim, int64_t count) {
  const int64_t length = shape.at(dim);
  count = std::clamp<int64_t>(count, 1, std::max<int64_t>(length, 1));
  std::vector<StridedLoop> slabs;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t lo = length * s / count;
    Shape slab = shape;
    slab[dim] = length * (s + 1) / count - lo;
    std::vector<int64_t> bases;
    for (const auto& strides : operand_strides) bases.push_back(lo * strides[dim]);
    slabs.emplace_back(slab, operand_strides, std::move(bases));
  }
  return slabs;
}

}  // namespace piper::engine::cpu
