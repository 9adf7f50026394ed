// Gather and piper.GatherGrad on CUDA. Checks follow engine/cpu/indexing.cc; an index
// out of range fails when the step's stream finishes, naming the op and the index.
#include "engine/cpu/op_checks.h"
#include "engine/cuda/indexing.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

GatherShape gather_shape(const KernelArgs& args, CudaContext& context, bool grad) {
  const cpu::GatherAxis g = cpu::check_gather(args, grad);
  GatherShape s;
  s.outer = g.outer;
  s.axis = g.axis_size;
  s.inner = g.inner;
  s.count = g.count;
  s.fault = context.device_fault();
  s.fault_code = context.fault_code(
      args.op() + ": index",
      "is out of range for an axis of size " + std::to_string(s.axis) + "; check the indices data");
  return s;
}

std::unique_ptr<PreparedKernel> gather_factory(const KernelArgs& args, CudaContext& context) {
  const GatherShape s = gather_shape(args, context, false);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  return make_kernel([&context, s, width = dtype_size(y.dtype), px = x.data,
                      indices = args.input(1).as<const int64_t>(),
                      py = y.data](const StepContext&) {
    launch_gather(s, width, px, indices, py, context.stream());
  });
}

std::unique_ptr<PreparedKernel> gather_grad_factory(const KernelArgs& args, CudaContext& context) {
  const GatherShape s = gather_shape(args, context, true);
  const TensorView& dy = args.input(0);
  const TensorView& dx = args.output(0);
  return make_kernel([&context, s, pdy = dy.as<const float>(),
                      indices = args.input(1).as<const int64_t>(),
                      pdx = dx.as<float>()](const StepContext&) {
    launch_gather_grad(s, pdy, indices, pdx, context.stream());
  });
}

}  // namespace

void register_indexing_kernels(CudaKernelTable& table) {
  table["Gather"] = gather_factory;
  table["piper.GatherGrad"] = gather_grad_factory;
}

}  // namespace piper::engine::cuda
