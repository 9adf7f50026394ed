// Learning-rate schedules, Hugging Face transformers' warm-up schedules with a floor: step s
// (0-based) trains at lr · lr_factor(schedule, s). The strategy names one
// ($.optimizer.lr_schedule), the plan carries it (plan::Optimizer, and the update ops'
// attributes), and the CPU and CUDA update kernels and piper-run's metrics all take the factor
// from here, so that they agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/plan.pb.h"

namespace piper::formats {

struct LrSchedule {
  std::string type = "constant";  // one of lr_schedule_types()
  int64_t warmup_steps = 0;       // W
  int64_t total_steps = 0;        // T; 0 = not given (only "constant" may omit it)
  double min_lr_ratio = 0;        // r, the floor linear and cosine decay to
  bool operator==(const LrSchedule&) const = default;
};

// "constant", "linear", "cosine".
const std::vector<std::string_view>& lr_schedule_types();

// What makes `schedule` invalid: the field at fault and what to do, or nullopt when it is
// valid (a known type; W >= 0; T >= 1 for linear and cosine; W <= T when T is given;
// r in [0, 1]).
struct LrScheduleProblem {
  std::string field;  // "type", "warmup_steps", "total_steps" or "min_lr_ratio"
  std::string what;
};
std::optional<LrScheduleProblem> lr_schedule_problem(const LrSchedule& schedule);

// f(s) = s / W while s < W; then with p = min(1, (s − W) / max(1, T − W)): 1 (constant),
// r + (1 − r)(1 − p) (linear), r + (1 − r) · ½(1 + cos πp) (cosine). Expects a valid schedule.
double lr_factor(const LrSchedule& schedule, int64_t step);

// The schedule a plan's optimizer carries (an empty type, from older planners, is constant).
LrSchedule lr_schedule_of(const plan::Optimizer& optimizer);
void set_lr_schedule(const LrSchedule& schedule, plan::Optimizer& optimizer);

// The learning rate the update of 0-based step `step` applies: lr · f(step).
double scheduled_lr(const plan::Optimizer& optimizer, int64_t step);

}  // namespace piper::formats
