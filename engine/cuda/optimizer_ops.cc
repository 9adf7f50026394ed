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

using cpu::update_schedule;

std::unique_ptr<PreparedKernel> sgd_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::SgdSettings sgd = cpu::check_sgd(args);
  const double momentum = sgd.momentum, dampening = sgd.dampening, weight_decay = sgd.weight_decay;
  const bool nesterov = sgd.nesterov;
  const float* norm = sgd.norm;
  SgdStep step;
  step.momentum = static_cast<float>(momentum);
  step.keep = static_cast<float>(1.0 - dampening);
  step.weight_decay = static_cast<float>(weight_decay);
  step.nesterov = nesterov;
  const cpu::UpdateSchedule update = update_schedule(args, norm);
  step.max_norm = update.max_norm;
  const TensorView& p = args.input(0);
  return make_kernel([&context, step, update, n = p.elements(), pp = p.as<float>(),
                      pg = args.input(1).as<const float>(), pm = sgd.momentum_buffer,
                      norm](const StepContext& run) mutable {
    step.first = run.update == 1;
    step.lr = static_cast<float>(update.lr_at(run));
    launch_sgd(step, n, pp, pg, pm, norm, context.stream());
  });
}

std::unique_ptr<PreparedKernel> adamw_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::AdamWSettings adamw = cpu::check_adamw(args);
  const double beta1 = adamw.beta1, beta2 = adamw.beta2, eps = adamw.eps,
               weight_decay = adamw.weight_decay;
  const float* norm = adamw.norm;
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
