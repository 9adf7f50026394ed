// What piper-run reports as it trains, beyond the loss: tokens per second from the plan's token
// inputs, model FLOP utilisation from the planned FLOPs and the device's peak, and rank 0's
// progress line every --log-every steps ("step 40/1000  loss 2.3456  12.3k tok/s  ETA 3m12s").
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "schemas/plan.pb.h"

namespace piper::engine {

// Tokens in one sample of the global batch: the most elements per sample among the plan's
// integer batch inputs of two dimensions or more (token ids [batch, sequence, ...]; a language
// model's targets count as many as its ids). None for a plan without such an input (an MLP's
// class labels [batch] are not tokens), so that no token rate is made up.
std::optional<int64_t> tokens_per_sample(const plan::Plan& plan);

// The share of `peak_flops` this rank's planned FLOPs (Plan.planned_step.flops) reach in a
// step of `seconds`; none without a peak, without planned FLOPs (older plans) or time.
std::optional<double> model_flops_utilization(const plan::Plan& plan, double seconds,
                                              std::optional<double> peak_flops);

// "950", "12.3k", "4.56M", "1.2G": a rate with three significant digits.
std::string short_rate(double value);
// "45s", "3m12s", "2h05m": a remaining time, rounded to the second.
std::string short_duration(double seconds);

// Rank 0's progress lines: after every `every` steps (and the last), the step of the run's
// total, the step's loss, the tokens (or, without token inputs, samples) per second of the
// steps' own time since the last line, and the time left at this run's pace so far (wall time
// since the log was made, which counts loading data and saving checkpoints too).
class ProgressLog {
 public:
  // `every` 0 prints nothing.
  ProgressLog(int64_t every, int64_t total_steps, int64_t samples_per_step,
              std::optional<int64_t> tokens_per_sample);
  // Step `step` (1-based) took `seconds` and ended at `loss`.
  void after_step(int64_t step, double loss, double seconds, std::ostream& out);

 private:
  int64_t every_;
  int64_t total_steps_;
  int64_t samples_per_step_;
  std::optional<int64_t> tokens_per_sample_;
  std::chrono::steady_clock::time_point start_;
  int64_t steps_run_ = 0;
  int64_t interval_steps_ = 0;
  double interval_seconds_ = 0;
};

}  // namespace piper::engine
