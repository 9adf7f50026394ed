#include "formats/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace piper::formats {

const std::vector<std::string_view>& lr_schedule_types() {
  static const std::vector<std::string_view> types = {"constant", "linear", "cosine"};
  return types;
}

std::optional<LrScheduleProblem> lr_schedule_problem(const LrSchedule& s) {
  const auto& types = lr_schedule_types();
  if (std::find(types.begin(), types.end(), s.type) == types.end()) {
    return LrScheduleProblem{"type", "unknown schedule \"" + s.type +
                                         "\"; expected \"constant\", \"linear\" or \"cosine\""};
  }
  if (s.warmup_steps < 0) {
    return LrScheduleProblem{"warmup_steps", "must be >= 0, got " + std::to_string(s.warmup_steps)};
  }
  if (s.total_steps < 0) {
    return LrScheduleProblem{"total_steps", "must be >= 1, got " + std::to_string(s.total_steps)};
  }
  if (s.total_steps == 0 && s.type != "constant") {
    return LrScheduleProblem{"total_steps", "required for type \"" + s.type +
                                                "\": give the step the decay ends at (>= 1)"};
  }
  if (s.total_steps != 0 && s.warmup_steps > s.total_steps) {
    return LrScheduleProblem{"warmup_steps", std::to_string(s.warmup_steps) +
                                                 " exceeds total_steps " +
                                                 std::to_string(s.total_steps) +
                                                 "; warm up for at most total_steps steps"};
  }
  if (!(s.min_lr_ratio >= 0 && s.min_lr_ratio <= 1)) {
    return LrScheduleProblem{"min_lr_ratio", "must be in [0, 1] (a fraction of lr)"};
  }
  return std::nullopt;
}

double lr_factor(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    return static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  }
  if (s.type == "constant") return 1.0;
  const double p =
      std::min(1.0, static_cast<double>(step - s.warmup_steps) /
                        static_cast<double>(std::max<int64_t>(1, s.total_steps - s.warmup_steps)));
  const double r = s.min_lr_ratio;
  if (s.type == "linear") return r + (1 - r) * (1 - p);
  return r + (1 - r) * 0.5 * (1 + std::cos(std::numbers::pi * p));
}

LrSchedule lr_schedule_of(const plan::Optimizer& optimizer) {
  const plan::LrSchedule& from = optimizer.lr_schedule();
  return LrSchedule{.type = from.type().empty() ? "constant" : from.type(),
                    .warmup_steps = from.warmup_steps(),
                    .total_steps = from.total_steps(),
                    .min_lr_ratio = from.min_lr_ratio()};
}

void set_lr_schedule(const LrSchedule& schedule, plan::Optimizer& optimizer) {
  plan::LrSchedule& to = *optimizer.mutable_lr_schedule();
  to.set_type(schedule.type);
  to.set_warmup_steps(schedule.warmup_steps);
  to.set_total_steps(schedule.total_steps);
  to.set_min_lr_ratio(schedule.min_lr_ratio);
}

double scheduled_lr(const plan::Optimizer& optimizer, int64_t step) {
  return optimizer.lr() * lr_factor(lr_schedule_of(optimizer), step);
}

}  // namespace piper::formats
