// Kernels that address the data by tuples of indices: ONNX GatherND, ScatterND and
// piper.GatherNDGrad (GatherND's adjoint, a ScatterND-add of dY into zeros). Geometry in
// op_checks.h (NdGeometry). A negative index counts from the end of its dimension; one out of
// range fails at run time naming the op, the index and its position in the indices.
//
// The scatters apply the tuples in order, threads splitting the slice's columns, so a
// repeated tuple with reduction none keeps its last update and sums are added in tuple order,
// whatever the thread count.
#include <algorithm>
#include <cstring>

#include "engine/cpu/checked_index.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/scatter_reduction.h"
#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

struct NdWalk {
  std::string op;
  NdGeometry g;
  const int64_t* indices = nullptr;
};

// The data offset of tuple n's slice.
int64_t tuple_offset(const NdWalk& w, int64_t n) {
  const auto k = static_cast<int64_t>(w.g.dims.size());
  int64_t offset = (n / std::max<int64_t>(w.g.tuples, 1)) * w.g.batch_stride;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t at = n * k + j;
    offset += checked_index(w.op, w.indices[at], w.g.dims[j], at) * w.g.strides[j];
  }
  return offset;
}

std::unique_ptr<PreparedKernel> gather_nd_factory(const KernelArgs& args) {
  const NdWalk w{args.op(), check_gather_nd(args, false), args.input(1).as<const int64_t>()};
  const size_t size = dtype_size(args.output(0).dtype);
  const size_t row = static_cast<size_t>(w.g.slice) * size;
  const int64_t tuples = w.g.batches * w.g.tuples;
  return make_kernel([w, row, size, tuples, px = args.input(0).as<const uint8_t>(),
                      py = args.output(0).as<uint8_t>()](const StepContext&) {
    parallel_for(tuples, (kParallelGrain + w.g.slice - 1) / std::max<int64_t>(w.g.slice, 1),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t n = begin; n < end; ++n) {
                     std::memcpy(py + static_cast<size_t>(n) * row,
                                 px + static_cast<size_t>(tuple_offset(w, n)) * size, row);
                   }
                 });
  });
}

// out[tuple n's slice] (reduction)= updates[n, :] for every tuple in order.
template <typename T>
void scatter_slices(const NdWalk& w, ScatterReduction reduction, const T* updates, T* out) {
  const int64_t tuples = w.g.batches * w.g.tuples, slice = w.g.slice;
  parallel_for(slice, (kParallelGrain + tuples - 1) / std::max<int64_t>(tuples, 1),
               [&](int64_t first, int64_t last) {
                 for (int64_t n = 0; n < tuples; ++n) {
                   T* to = out + tuple_offset(w, n);
                   const T* from = updates + n * slice;
                   for (int64_t s = first; s < last; ++s) combine_update(reduction, to[s], from[s]);
                 }
               });
}

template <typename T>
std::unique_ptr<PreparedKernel> make_scatter_nd(const NdWalk& w, ScatterReduction reduction,
                                                const KernelArgs& args) {
  return make_kernel([w, reduction, px = args.input(0).as<const T>(),
                      pu = args.input(2).as<const T>(), py = args.output(0).as<T>(),
                      total = args.output(0).elements()](const StepContext&) {
    if (py != px) {
      parallel_for(total, kParallelGrain, [&](int64_t begin, int64_t end) {
        std::copy(px + begin, px + end, py + begin);
      });
    }
    scatter_slices(w, reduction, pu, py);
  });
}

std::unique_ptr<PreparedKernel> scatter_nd_factory(const KernelArgs& args) {
  const NdWalk w{args.op(), check_scatter_nd(args), args.input(1).as<const int64_t>()};
  const plan::DType dtype = args.output(0).dtype;
  const ScatterReduction reduction = check_scatter_reduction(args, dtype);
  return by_scatter_type(dtype,
                         [&]<typename T>() { return make_scatter_nd<T>(w, reduction, args); });
}

// piper.GatherNDGrad: dX = zeros of the data's shape with every slice of dY added at its tuple.
std::unique_ptr<PreparedKernel> gather_nd_grad_factory(const KernelArgs& args) {
  const NdWalk w{args.op(), check_gather_nd(args, true), args.input(1).as<const int64_t>()};
  return make_kernel([w, pdy = args.input(0).as<const float>(), pdx = args.output(0).as<float>(),
                      total = args.output(0).elements()](const StepContext&) {
    parallel_for(total, kParallelGrain,
                 [&](int64_t begin, int64_t end) { std::fill(pdx + begin, pdx + end, 0.0f); });
    scatter_slices(w, ScatterReduction::kAdd, pdy, pdx);
  });
}

// The geometry of `data` addressed by `indices` [batch..., tuple..., k] with `batch_dims`
// leading batch dimensions; throws unless `indexed` (the gathered tensor or the updates) has
// the shape the tuples address.
NdGeometry nd_geometry(const KernelArgs& args, const Shape& data, const TensorView& indices,
                       int64_t batch_dims, const Shape& indexed, const std::string& indexed_what) {
  args.expect_dtype(indices, plan::INT64, "indices (input 1)");
  const auto rank = static_cast<int64_t>(data.size());
  const int64_t q = indices.rank();
  if (rank < 1 || q < 1 || batch_dims < 0 || batch_dims >= std::min(rank, q)) {
    args.fail("data " + shape_string(data) + " and indices " + shape_string(indices.shape) +
              " need at least one dimension each, and batch_dims " + std::to_string(batch_dims) +
              " must be smaller than both ranks");
  }
  const int64_t k = indices.shape.back();
  if (k < 1 || k > rank - batch_dims) {
    args.fail("the indices' last dimension (" + std::to_string(k) + ") must lie in [1, " +
              std::to_string(rank - batch_dims) + "] for data " + shape_string(data) +
              " with batch_dims " + std::to_string(batch_dims));
  }
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (indices.shape[d] != data[d]) {
      args.fail("the batch dimensions of the indices " + shape_string(indices.shape) +
                " and the data " + shape_string(data) + " differ in dimension " +
                std::to_string(d));
    }
  }
  Shape expected(indices.shape.begin(), indices.shape.end() - 1);
  expected.insert(expected.end(), data.begin() + batch_dims + k, data.end());
  if (expected != indexed) {
    args.fail("indices " + shape_string(indices.shape) + " on data " + shape_string(data) +
              " with batch_dims " + std::to_string(batch_dims) + " address " +
              shape_string(expected) + " but " + indexed_what + " has shape " +
              shape_string(indexed));
  }
  const std::vector<int64_t> strides = contiguous_strides(data);
  const auto b = static_cast<size_t>(batch_dims), end = static_cast<size_t>(batch_dims + k);
  NdGeometry g;
  g.batches = product(data, 0, b);
  g.tuples = product(indices.shape, b, indices.shape.size() - 1);
  g.slice = product(data, end, data.size());
  g.batch_stride = product(data, b, data.size());
  g.dims.assign(data.begin() + batch_dims, data.begin() + batch_dims + k);
  g.strides.assign(strides.begin() + batch_dims, strides.begin() + batch_dims + k);
  return g;
}

}  // namespace

NdGeometry check_gather_nd(const KernelArgs& args, bool grad) {
  const auto [gathered, data] = check_gather_operands(args, grad);
  return nd_geometry(args, data.shape, args.input(1), args.attributes().get_int("batch_dims", 0),
                     gathered.shape, grad ? "dY (input 0)" : "the output");
}

NdGeometry check_scatter_nd(const KernelArgs& args) {
  const auto [data, updates] = check_scatter_operands(args);
  return nd_geometry(args, data.shape, args.input(1), 0, updates.shape, "updates (input 2)");
}

ScatterReduction check_scatter_reduction(const KernelArgs& args, plan::DType data) {
  const std::string reduction = args.attributes().get_string("reduction", "none");
  if (reduction == "none") return ScatterReduction::kNone;
  if (reduction != "add" && reduction != "mul") {
    args.fail("reduction '" + reduction + "' is not one Piper implements (none, add, mul)");
  }
  if (data != plan::FLOAT32 && data != plan::INT64) {
    args.fail("reduction '" + reduction + "' takes float32 or int64 data, not " + dtype_name(data));
  }
  return reduction == "add" ? ScatterReduction::kAdd : ScatterReduction::kMul;
}

void register_nd_indexing_kernels(KernelTable& table) {
  table["GatherND"] = gather_nd_factory;
  table["piper.GatherNDGrad"] = gather_nd_grad_factory;
  table["ScatterND"] = scatter_nd_factory;
}

}  // namespace piper::engine::cpu
