// Activation ops on CUDA: the element-wise unary ops of engine/cpu/activation_math.h (Abs,
// LeakyRelu, ..., Floor, Ceil, Round, Sign), IsNaN, IsInf, Clip and their gradients. Checks,
// attributes and formulas are the CPU's (engine/cpu/activation.cc); float32 (Abs and Sign also
// int64), the backend widening bfloat16 tensors for them (CudaBackend::prepare).
#include "engine/cpu/activation.h"
#include "engine/cpu/elementwise_map.h"
#include "engine/cuda/activation.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {
namespace {

CudaKernelFactory activation_factory(Activation op) {
  return [op](const KernelArgs& args, CudaContext& context) -> std::unique_ptr<PreparedKernel> {
    cpu::check_activation(op, args);
    if (args.output(0).dtype == plan::INT64) {
      return make_kernel([&context, op, n = args.output(0).elements(),
                          px = args.input(0).as<const int64_t>(),
                          py = args.output(0).as<int64_t>()](const StepContext&) {
        launch_activation(op, n, px, py, context.stream());
      });
    }
    return make_kernel([&context, op, p = cpu::activation_params(op, args.attributes()),
                        n = args.output(0).elements(), px = args.input(0).as<const float>(),
                        py = args.output(0).as<float>()](const StepContext&) {
      launch_activation(op, p, n, px, py, context.stream());
    });
  };
}

CudaKernelFactory activation_grad_factory(Activation op) {
  return [op](const KernelArgs& args, CudaContext& context) {
    args.expect_saved_grad(cpu::gradient_reads_output(op) ? "Y" : "X");
    return make_kernel([&context, op, p = cpu::activation_params(op, args.attributes()),
                        n = args.output(0).elements(), pdy = args.input(0).as<const float>(),
                        ps = args.input(1).as<const float>(),
                        pdx = args.output(0).as<float>()](const StepContext&) {
      launch_activation_grad(op, p, n, pdy, ps, pdx, context.stream());
    });
  };
}

std::unique_ptr<PreparedKernel> float_class_factory(const KernelArgs& args, CudaContext& context) {
  const FloatClass c = cpu::check_float_class(args);
  return make_kernel([&context, c, n = args.output(0).elements(),
                      px = args.input(0).as<const float>(),
                      py = args.output(0).as<uint8_t>()](const StepContext&) {
    launch_float_class(c, n, px, py, context.stream());
  });
}

std::unique_ptr<PreparedKernel> clip_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_clip(args);
  const float* lo = args.has_input(1) ? args.input(1).as<const float>() : nullptr;
  const float* hi = args.has_input(2) ? args.input(2).as<const float>() : nullptr;
  return make_kernel([&context, lo, hi, n = args.output(0).elements(),
                      px = args.input(0).as<const float>(), py = args.output(0).as<float>()](
                         const StepContext&) { launch_clip(n, px, lo, hi, py, context.stream()); });
}

std::unique_ptr<PreparedKernel> clip_grad_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_clip_grad(args);
  return make_kernel([&context, n = args.output(0).elements(),
                      pdy = args.input(0).as<const float>(), px = args.input(1).as<const float>(),
                      py = args.input(2).as<const float>(),
                      pdx = args.output(0).as<float>()](const StepContext&) {
    launch_clip_grad(n, pdy, px, py, pdx, context.stream());
  });
}

}  // namespace

void register_activation_kernels(CudaKernelTable& table) {
  for (const cpu::ActivationType& t : cpu::activation_types()) {
    table[t.type] = activation_factory(t.activation);
    if (t.gradient) table[t.gradient] = activation_grad_factory(t.activation);
  }
  table["IsNaN"] = float_class_factory;
  table["IsInf"] = float_class_factory;
  table["Clip"] = clip_factory;
  table["piper.ClipGrad"] = clip_grad_factory;
}

}  // namespace piper::engine::cuda
