// Dropout and piper.DropoutGrad on CUDA, with the CPU kernel's checks (engine/cpu/dropout.cc)
// and random stream, so that both backends drop the same elements.
#include <bit>

#include "engine/cpu/op_checks.h"
#include "engine/cuda/dropout.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {
namespace {

std::unique_ptr<PreparedKernel> dropout_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_dropout(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  uint8_t* mask = args.has_output(1) ? args.output(1).as<uint8_t>() : nullptr;
  const int32_t fault_code = context.fault_code([](int64_t value, int64_t) {
    return cpu::dropout_ratio_error(std::bit_cast<float>(static_cast<uint32_t>(value)));
  });
  return make_kernel([&context, mode = cpu::dropout_mode(args, 1), fault_code, mask,
                      n = x.elements(), px = x.as<const float>(), py = y.as<float>(),
                      keying = cpu::dropout_keying(args)](const StepContext& step) {
    launch_dropout(mode, dropout::step_key(step.seed, step.step, keying.node), keying.box, n, px,
                   py, mask, context.device_fault(), fault_code, context.stream());
  });
}

std::unique_ptr<PreparedKernel> dropout_grad_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_dropout_grad(args);
  return make_kernel([&context, mode = cpu::dropout_mode(args, 2), n = args.output(0).elements(),
                      pdy = args.input(0).as<const float>(),
                      pmask = args.input(1).as<const uint8_t>(),
                      pdx = args.output(0).as<float>()](const StepContext&) {
    launch_dropout_grad(mode, n, pdy, pmask, pdx, context.stream());
  });
}

}  // namespace

void register_dropout_kernels(CudaKernelTable& table) {
  table["Dropout"] = dropout_factory;
  table["piper.DropoutGrad"] = dropout_grad_factory;
}

}  // namespace piper::engine::cuda
