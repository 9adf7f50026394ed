#include "engine/runtime/progress.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace piper::engine {

std::optional<int64_t> tokens_per_sample(const plan::Plan& plan) {
  std::optional<int64_t> most;
  for (const plan::BatchInput& input : plan.inputs()) {
    const plan::Tensor& tensor = plan.tensors(input.tensor());
    if (tensor.dtype() != plan::INT64 || tensor.shape_size() < 2) continue;
    int64_t elements = 1;
    for (int d = 1; d < tensor.shape_size(); ++d) elements *= tensor.shape(d);
    most = std::max(most.value_or(0), elements);
  }
  return most;
}

std::optional<double> model_flops_utilization(const plan::Plan& plan, double seconds,
                                              std::optional<double> peak_flops) {
  const double flops = plan.planned_step().flops();
  if (!peak_flops || !(flops > 0) || !(seconds > 0)) return std::nullopt;
  return flops / seconds / *peak_flops;
}

std::string short_rate(double value) {
  static const char* const kSuffixes[] = {"", "k", "M", "G", "T"};
  int power = 0;
  while (std::fabs(value) >= 999.5 && power < 4) {
    value /= 1000;
    ++power;
  }
  char text[32];
  const int decimals = power == 0 || std::fabs(value) >= 99.95 ? 0
                       : std::fabs(value) >= 9.995             ? 1
                                                               : 2;
  std::snprintf(text, sizeof text, "%.*f%s", decimals, value, kSuffixes[power]);
  return text;
}

std::string short_duration(double seconds) {
  const int64_t total = std::llround(std::max(seconds, 0.0));
  const int64_t hours = total / 3600, minutes = total / 60 % 60, rest = total % 60;
  char text[48];
  if (hours > 0) {
    std::snprintf(text, sizeof text, "%" PRId64 "h%02" PRId64 "m", hours, minutes);
  } else if (minutes > 0) {
    std::snprintf(text, sizeof text, "%" PRId64 "m%02" PRId64 "s", minutes, rest);
  } else {
    std::snprintf(text, sizeof text, "%" PRId64 "s", rest);
  }
  return text;
}

ProgressLog::ProgressLog(int64_t every, int64_t total_steps, int64_t samples_per_step,
                         std::optional<int64_t> tokens_per_sample)
    : every_(every),
      total_steps_(total_steps),
      samples_per_step_(samples_per_step),
      tokens_per_sample_(tokens_per_sample),
      start_(std::chrono::steady_clock::now()) {}

void ProgressLog::after_step(int64_t step, double loss, double seconds, std::ostream& out) {
  if (every_ <= 0) return;
  ++steps_run_;
  ++interval_steps_;
  interval_seconds_ += seconds;
  if (step % every_ != 0 && step != total_steps_) return;
  const double samples = static_cast<double>(samples_per_step_ * interval_steps_);
  const double rate = interval_seconds_ > 0 ? samples / interval_seconds_ : 0.0;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta =
      elapsed / static_cast<double>(steps_run_) * static_cast<double>(total_steps_ - step);
  char line[160];
  std::snprintf(
      line, sizeof line, "step %" PRId64 "/%" PRId64 "  loss %.4f  %s %s  ETA %s", step,
      total_steps_, loss,
      short_rate(tokens_per_sample_ ? rate * static_cast<double>(*tokens_per_sample_) : rate)
          .c_str(),
      tokens_per_sample_ ? "tok/s" : "samples/s", short_duration(eta).c_str());
  out << line << std::endl;
  interval_steps_ = 0;
  interval_seconds_ = 0;
}

}  // namespace piper::engine
