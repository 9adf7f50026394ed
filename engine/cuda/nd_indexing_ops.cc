// GatherND, piper.GatherNDGrad and ScatterND on CUDA, with the CPU kernels' checks
// (engine/cpu/nd_indexing.cc). An index out of range fails when the step's stream finishes,
// naming the op, the index and its position. The gradient and ScatterND's add use atomics, so
// their sums may round differently from the CPU's; of several updates to one element with
// reduction none, which one lands is unspecified (the CPU keeps the last).
#include <algorithm>

#include "engine/cpu/checked_index.h"
#include "engine/cpu/op_checks.h"
#include "engine/cuda/check.h"
#include "engine/cuda/nd_indexing.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

NdIndex nd_index(const KernelArgs& args, CudaContext& context, const cpu::NdGeometry& g) {
  if (g.dims.size() > static_cast<size_t>(NdIndex::kMaxTuple)) {
    args.fail("index tuples of " + std::to_string(g.dims.size()) + " components exceed the " +
              std::to_string(NdIndex::kMaxTuple) + " the CUDA kernel takes");
  }
  NdIndex index;
  index.tuples = g.batches * g.tuples;
  index.per_batch = std::max<int64_t>(g.tuples, 1);
  index.slice = g.slice;
  index.batch_stride = g.batch_stride;
  index.k = static_cast<int>(g.dims.size());
  for (size_t j = 0; j < g.dims.size(); ++j) {
    index.dims[j] = g.dims[j];
    index.strides[j] = g.strides[j];
  }
  index.fault = context.device_fault();
  index.fault_code = context.fault_code([op = args.op(), dims = g.dims](int64_t value,
                                                                        int64_t position) {
    return cpu::index_error(op, value, dims[static_cast<size_t>(position) % dims.size()], position);
  });
  return index;
}

std::unique_ptr<PreparedKernel> gather_nd_factory(const KernelArgs& args, CudaContext& context) {
  return make_kernel([&context, index = nd_index(args, context, cpu::check_gather_nd(args, false)),
                      width = dtype_size(args.output(0).dtype), px = args.input(0).data,
                      indices = args.input(1).as<const int64_t>(),
                      py = args.output(0).data](const StepContext&) {
    launch_gather_nd(index, width, px, indices, py, context.stream());
  });
}

// ScatterND: Y = a copy of the data, then the updates combined in.
std::unique_ptr<PreparedKernel> scatter_nd_factory(const KernelArgs& args, CudaContext& context) {
  const TensorView& y = args.output(0);
  return make_kernel([&context, index = nd_index(args, context, cpu::check_scatter_nd(args)),
                      reduction = cpu::check_scatter_reduction(args, y.dtype),
                      width = dtype_size(y.dtype), px = args.input(0).data,
                      indices = args.input(1).as<const int64_t>(), pu = args.input(2).data,
                      py = y.data, bytes = y.bytes()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    if (bytes > 0 && px != py) {
      PIPER_CUDA_CHECK(cudaMemcpyAsync(py, px, bytes, cudaMemcpyDeviceToDevice, stream));
    }
    launch_scatter_nd(index, width, reduction, indices, pu, py, stream);
  });
}

// piper.GatherNDGrad: dX = zeros, then every slice of dY added at its tuple.
std::unique_ptr<PreparedKernel> gather_nd_grad_factory(const KernelArgs& args,
                                                       CudaContext& context) {
  return make_kernel([&context, index = nd_index(args, context, cpu::check_gather_nd(args, true)),
                      pdy = args.input(0).data, indices = args.input(1).as<const int64_t>(),
                      pdx = args.output(0).data,
                      bytes = args.output(0).bytes()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    if (bytes > 0) PIPER_CUDA_CHECK(cudaMemsetAsync(pdx, 0, bytes, stream));
    launch_scatter_nd(index, sizeof(float), cpu::ScatterReduction::kAdd, indices, pdy, pdx, stream);
  });
}

}  // namespace

void register_nd_indexing_kernels(CudaKernelTable& table) {
  table["GatherND"] = gather_nd_factory;
  table["piper.GatherNDGrad"] = gather_nd_grad_factory;
  table["ScatterND"] = scatter_nd_factory;
}

}  // namespace piper::engine::cuda
