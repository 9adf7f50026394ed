// Pow, piper.PowBaseGrad and piper.PowExponentGrad on CUDA, with the CPU kernels' checks
// (engine/cpu/math.cc) and element functions (engine/cpu/power_math.h).
#include "engine/cpu/op_checks.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/power.h"

namespace piper::engine::cuda {
namespace {

std::unique_ptr<PreparedKernel> pow_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_pow(args);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  return make_kernel([&context, index = broadcast_index(y.shape, {a.shape, b.shape}),
                      int_base = a.dtype == plan::INT64, int_exponent = b.dtype == plan::INT64,
                      pa = a.data, pb = b.data, py = y.data](const StepContext&) {
    launch_pow(index, int_base, int_exponent, pa, pb, py, context.stream());
  });
}

std::unique_ptr<PreparedKernel> pow_grad_factory(const KernelArgs& args, CudaContext& context,
                                                 PowGrad grad) {
  cpu::check_pow_grad(args, grad == PowGrad::kBase);
  const TensorView& dy = args.input(0);
  const TensorView& a = args.input(1);
  const TensorView& b = args.input(2);
  const TensorView& dx = args.output(0);
  return make_kernel(
      [&context, grad, index = broadcast_index(dx.shape, {dy.shape, a.shape, b.shape}),
       int_b = b.dtype == plan::INT64, pdy = dy.as<const float>(), pa = a.as<const float>(),
       pb = b.data, pdx = dx.as<float>()](const StepContext&) {
        launch_pow_grad(grad, index, int_b, pdy, pa, pb, pdx, context.stream());
      });
}

}  // namespace

void register_power_kernels(CudaKernelTable& table) {
  table["Pow"] = pow_factory;
  table["piper.PowBaseGrad"] = [](const KernelArgs& args, CudaContext& context) {
    return pow_grad_factory(args, context, PowGrad::kBase);
  };
  table["piper.PowExponentGrad"] = [](const KernelArgs& args, CudaContext& context) {
    return pow_grad_factory(args, context, PowGrad::kExponent);
  };
}

}  // namespace piper::engine::cuda
