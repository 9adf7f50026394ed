// Checks the optimizer kernels and piper.SumSquares share on every backend
// (engine/cpu/optimizers.cc, engine/cuda/optimizer_ops.cc), so that their errors read alike.
#pragma once

#include <vector>

#include "engine/cpu/kernel_registry.h"
#include "formats/lr_schedule.h"

namespace piper::engine::cpu {

// Checks that no output is given and that inputs 0 to names.size() - 1 are float32 tensors
// shaped like the parameter (input 0); `names` label them in errors.
void check_optimizer_state(const KernelArgs& args, const std::vector<const char*>& names);

// The global gradient norm, the optional input `index` after the state (a float32 scalar),
// or null when the plan gives none. An update that reads a norm that is not finite changes
// nothing.
const float* gradient_norm_input(const KernelArgs& args, size_t index);

// What an update's step changes besides the gradient: the scheduled learning rate and the
// clipping bound (attributes lr, lr_schedule, warmup_steps, total_steps, min_lr_ratio,
// clip_grad_norm; formats/lr_schedule.h).
struct UpdateSchedule {
  double lr = 0;
  formats::LrSchedule schedule;
  float max_norm = 0;  // clip_grad_norm; 0: no clipping
  // The learning rate of the 1-based training step `context.step`.
  double lr_at(const StepContext& context) const {
    return lr * formats::lr_factor(schedule, context.step - 1);
  }
};

// Reads and checks the attributes: the schedule as the strategy's rules say, clip_grad_norm
// >= 0 and, when > 0, a gradient norm input (`norm` not null) to clip by.
UpdateSchedule update_schedule(const KernelArgs& args, const float* norm);

// piper.SGD(P, G[, M][, norm]): its attributes (torch.optim.SGD's), checked with its state
// and the gradient norm input; `momentum_buffer` is M's data, null without momentum.
struct SgdSettings {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  float* momentum_buffer = nullptr;
  const float* norm = nullptr;  // gradient_norm_input()
};
SgdSettings check_sgd(const KernelArgs& args);

// piper.AdamW(P, G, M, V[, norm]): its attributes (torch.optim.AdamW's), checked with its state
// and the gradient norm input.
struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  const float* norm = nullptr;  // gradient_norm_input()
};
AdamWSettings check_adamw(const KernelArgs& args);

// piper.SumSquares(X1, ..., Xn) -> Y, attributes `starts` and `counts`: the slices of the
// flattened float32 inputs whose squares add up to the float32 scalar Y.
struct SquaredSlices {
  std::vector<const float*> data;  // the first element of each slice
  std::vector<int64_t> counts;
  float* y = nullptr;
};
SquaredSlices squared_slices(const KernelArgs& args);

}  // namespace piper::engine::cpu
