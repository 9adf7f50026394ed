// GatherElements, piper.GatherElementsGrad and ScatterElements on CUDA, with the CPU kernels'
// checks (engine/cpu/indexing.cc). An index out of range fails when the step's stream
// finishes, naming the op, the index and its position. The gradient and ScatterElements' add
// use atomics, so their sums may round differently from the CPU's; of several updates to one
// element with reduction none, which one lands is unspecified (the CPU keeps the last).
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/gather_elements.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {
namespace {

// The index space of a checked op along `axis` over data of shape `data`.
ElementsIndex elements_index(const KernelArgs& args, CudaContext& context, int64_t axis,
                             const Shape& data) {
  const auto a = static_cast<size_t>(axis);
  const Shape& indices = args.input(1).shape;
  std::vector<int64_t> data_strides = cpu::contiguous_strides(data);
  ElementsIndex g;
  g.axis_size = data[a];
  g.axis_stride = data_strides[a];
  data_strides[a] = 0;
  g.index = strided_index(indices, {cpu::contiguous_strides(indices), data_strides});
  g.fault = context.device_fault();
  g.fault_code = context.fault_code(args.op() + ": index", "is out of range for an axis of size " +
                                                               std::to_string(g.axis_size) +
                                                               "; check the indices data");
  return g;
}

ElementsIndex gather_index(const KernelArgs& args, CudaContext& context, bool grad) {
  const int64_t axis = cpu::check_gather_elements(args, grad);
  return elements_index(args, context, axis, (grad ? args.output(0) : args.input(0)).shape);
}

std::unique_ptr<PreparedKernel> gather_elements_factory(const KernelArgs& args,
                                                        CudaContext& context) {
  return make_kernel([&context, g = gather_index(args, context, false),
                      width = dtype_size(args.output(0).dtype), px = args.input(0).data,
                      indices = args.input(1).as<const int64_t>(),
                      py = args.output(0).data](const StepContext&) {
    launch_gather_elements(g, width, px, indices, py, context.stream());
  });
}

std::unique_ptr<PreparedKernel> gather_elements_grad_factory(const KernelArgs& args,
                                                             CudaContext& context) {
  return make_kernel([&context, g = gather_index(args, context, true),
                      pdy = args.input(0).as<const float>(),
                      indices = args.input(1).as<const int64_t>(), pdx = args.output(0).as<float>(),
                      bytes = args.output(0).bytes()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    if (bytes > 0) PIPER_CUDA_CHECK(cudaMemsetAsync(pdx, 0, bytes, stream));
    launch_gather_elements_grad(g, pdy, indices, pdx, stream);
  });
}

// ScatterElements: Y = a copy of the data, then the updates combined in.
std::unique_ptr<PreparedKernel> scatter_elements_factory(const KernelArgs& args,
                                                         CudaContext& context) {
  const int64_t axis = cpu::check_scatter_elements(args);
  const TensorView& y = args.output(0);
  return make_kernel([&context, g = elements_index(args, context, axis, y.shape),
                      reduction = cpu::check_scatter_reduction(args, y.dtype),
                      width = dtype_size(y.dtype), px = args.input(0).data,
                      indices = args.input(1).as<const int64_t>(), pu = args.input(2).data,
                      py = y.data, bytes = y.bytes()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    if (bytes > 0 && px != py) {
      PIPER_CUDA_CHECK(cudaMemcpyAsync(py, px, bytes, cudaMemcpyDeviceToDevice, stream));
    }
    launch_scatter_elements(g, width, reduction, indices, pu, py, stream);
  });
}

}  // namespace

void register_gather_elements_kernels(CudaKernelTable& table) {
  table["GatherElements"] = gather_elements_factory;
  table["piper.GatherElementsGrad"] = gather_elements_grad_factory;
  table["ScatterElements"] = scatter_elements_factory;
}

}  // namespace piper::engine::cuda
