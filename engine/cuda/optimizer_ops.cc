// piper.AdamW and piper.SGD on CUDA: in-place updates of the parameter (input 0) and its
// state, checked as engine/cpu/optimizers.cc checks them, at the step's scheduled learning
// rate (computed on the host); the kernels read the optional gradient norm on the device,
// change nothing when it is not finite and clip by it.
#include <algorithm>
#include <cmath>

#include "engine/cpu/optimizer_args.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/optimizers.h"

namespace piper::engine::cuda {
namespace {

using cpu::check_optimizer_state;
using cpu::gradient_norm_input;
using cpu::update_schedule;

std::unique_ptr<PreparedKernel> sgd_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(2, 4);
  const auto& attributes = args.attributes();
  const double momentum = attributes.get_float("momentum", 0.0);
  const double dampening = attributes.get_float("dampening", 0.0);
  const double weight_decay = attributes.get_float("weight_decay", 0.0);
  const bool nesterov = attributes.get_int("nesterov", 0) != 0;
  if (nesterov && (momentum <= 0.0 || dampening != 0.0)) {
    args.fail("Nesterov momentum requires momentum > 0 and dampening = 0 (as torch.optim.SGD)");
  }
  if (momentum != 0.0) {
    check_optimizer_state(args, {"P (input 0)", "G (input 1)", "momentum buffer M (input 2)"});
  } else {
    check_optimizer_state(args, {"P (input 0)", "G (input 1)"});
  }
  const float* norm = gradient_norm_input(args, momentum != 0.0 ? 3 : 2);
  SgdStep step;
  step.momentum = static_cast<float>(momentum);
  step.keep = static_cast<float>(1.0 - dampening);
  step.weight_decay = static_cast<float>(weight_decay);
  step.nesterov = nesterov;
  const cpu::UpdateSchedule update = update_schedule(args, norm);
  step.max_norm = update.max_norm;
  const TensorView& p = args.input(0);
  return make_kernel([&context, step, update, n = p.elements(), pp = p.as<float>(),
                      pg = args.input(1).as<const float>(),
                      pm = momentum != 0.0 ? args.input(2).as<float>() : nullptr,
                      norm](const StepContext& run) mutable {
    step.first = run.update == 1;
    step.lr = static_cast<float>(update.lr_at(run));
    launch_sgd(step, n, pp, pg, pm, norm, context.stream());
  });
}

std::unique_ptr<PreparedKernel> adamw_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(4, 5);
  check_optimizer_state(args, {"P (input 0)", "G (input 1)", "M (input 2)", "V (input 3)"});
  const auto& attributes = args.attributes();
  const double beta1 = attributes.get_float("beta1", 0.9);
  const double beta2 = attributes.get_float("beta2", 0.999);
  const double eps = attributes.get_float("eps", 1e-8);
  const double weight_decay = attributes.get_float("weight_decay", 1e-2);
  const float* norm = gradient_norm_input(args, 4);
  const cpu::UpdateSchedule update = update_schedule(args, norm);
  const TensorView& p = args.input(0);
  return make_kernel([&context, n = p.elements(), pp = p.as<float>(),
                      pg = args.input(1).as<const float>(), pm = args.input(2).as<float>(),
                      pv = args.input(3).as<float>(), norm, update, beta1, beta2, eps,
                      weight_decay](const StepContext& run) {
    const auto t = static_cast<double>(run.update);
    const double lr = update.lr_at(run);
    AdamWStep step;
    step.decay = static_cast<float>(1.0 - lr * weight_decay);
    step.beta1 = static_cast<float>(beta1);
    step.beta2 = static_cast<float>(beta2);
    step.one_minus_beta1 = static_cast<float>(1.0 - beta1);
    step.one_minus_beta2 = static_cast<float>(1.0 - beta2);
    step.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, t)));
    step.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t)));
    step.epsilon = static_cast<float>(eps);
    step.max_norm = update.max_norm;
    launch_adamw(step, n, pp, pg, pm, pv, norm, context.stream());
  });
}

// piper.SumSquares: this rank's share of the squared global gradient norm.
std::unique_ptr<PreparedKernel> sum_squares_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::SquaredSlices slices = cpu::squared_slices(args);
  const std::shared_ptr<double> partials =
      device_array<double>(std::max<size_t>(slices.data.size(), 1) * kSumSquaresBlocks);
  return make_kernel([&context, slices, partials](const StepContext&) {
    launch_sum_squares(slices.data, slices.counts, partials.get(), slices.y, context.stream());
  });
}

}  // namespace

void register_optimizer_kernels(CudaKernelTable& table) {
  table["piper.SGD"] = sgd_factory;
  table["piper.AdamW"] = adamw_factory;
  table["piper.SumSquares"] = sum_squares_factory;
}

}  // namespace piper::engine::cuda
