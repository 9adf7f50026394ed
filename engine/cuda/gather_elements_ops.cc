// GatherElements and piper.GatherElementsGrad on CUDA, with the CPU kernels' checks
// (engine/cpu/indexing.cc). An index out of range fails when the step's stream finishes,
// naming the op, the index and its position. The gradient adds with atomics, so its sums may
// round differently from the CPU's.
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/gather_elements.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {
namespace {

ElementsIndex elements_index(const KernelArgs& args, CudaContext& context, bool grad) {
  const auto axis = static_cast<size_t>(cpu::check_gather_elements(args, grad));
  const Shape& indices = args.input(1).shape;
  std::vector<int64_t> data_strides =
      cpu::contiguous_strides((grad ? args.output(0) : args.input(0)).shape);
  ElementsIndex g;
  g.axis_size = (grad ? args.output(0) : args.input(0)).shape[axis];
  g.axis_stride = data_strides[axis];
  data_strides[axis] = 0;
  g.index = strided_index(indices, {cpu::contiguous_strides(indices), data_strides});
  g.fault = context.device_fault();
  g.fault_code = context.fault_code(args.op() + ": index", "is out of range for an axis of size " +
                                                               std::to_string(g.axis_size) +
                                                               "; check the indices data");
  return g;
}

std::unique_ptr<PreparedKernel> gather_elements_factory(const KernelArgs& args,
                                                        CudaContext& context) {
  return make_kernel([&context, g = elements_index(args, context, false),
                      width = dtype_size(args.output(0).dtype), px = args.input(0).data,
                      indices = args.input(1).as<const int64_t>(),
                      py = args.output(0).data](const StepContext&) {
    launch_gather_elements(g, width, px, indices, py, context.stream());
  });
}

std::unique_ptr<PreparedKernel> gather_elements_grad_factory(const KernelArgs& args,
                                                             CudaContext& context) {
  return make_kernel([&context, g = elements_index(args, context, true),
                      pdy = args.input(0).as<const float>(),
                      indices = args.input(1).as<const int64_t>(), pdx = args.output(0).as<float>(),
                      bytes = args.output(0).bytes()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    if (bytes > 0) PIPER_CUDA_CHECK(cudaMemsetAsync(pdx, 0, bytes, stream));
    launch_gather_elements_grad(g, pdy, indices, pdx, stream);
  });
}

}  // namespace

void register_gather_elements_kernels(CudaKernelTable& table) {
  table["GatherElements"] = gather_elements_factory;
  table["piper.GatherElementsGrad"] = gather_elements_grad_factory;
}

}  // namespace piper::engine::cuda
