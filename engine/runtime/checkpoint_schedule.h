// When piper-run saves checkpoints: every --save-every steps, after the last step, and at the
// step boundary after SIGTERM or SIGINT reaches any rank (every rank then saves the same step
// and stops); and where it resumes (--resume: the latest committed step).
#pragma once

#include <csignal>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "engine/runtime/checkpoint.h"
#include "engine/runtime/session.h"
#include "formats/error.h"

namespace piper::engine {

struct CheckpointOptions {
  std::string directory;   // seen by every rank
  int64_t save_every = 0;  // 0: only after the last step and on a signal
  int64_t keep = 0;        // committed steps kept; 0: all
  bool resume = false;
};

// A run stopped by SIGTERM or SIGINT after saving its checkpoint; piper-run exits 128 + signal.
class Interrupted : public Error {
 public:
  Interrupted(const std::string& message, int signal) : Error(message), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

class CheckpointSchedule {
 public:
  // Without `options`, does nothing. With them, catches SIGTERM and SIGINT while it lives.
  // `data` and `tokens` describe the batch source (BatchSource::describe, token_stream).
  CheckpointSchedule(Session& session, std::optional<CheckpointOptions> options, int64_t steps,
                     uint64_t seed, std::string data,
                     std::optional<formats::TokenStream> tokens = std::nullopt);
  ~CheckpointSchedule();
  CheckpointSchedule(const CheckpointSchedule&) = delete;
  CheckpointSchedule& operator=(const CheckpointSchedule&) = delete;

  // The 0-based step to train from: the latest checkpoint's when resuming (its state loaded into
  // the session), else 0. Throws when that step lies past the run's last, or when the
  // checkpoint or this run trains on a token stream and the other does not draw the same
  // windows.
  int64_t resume(std::ostream& out);
  // After 1-based step `step` has finished: saves when it is due, and after a signal throws
  // Interrupted once saved. Collective when checkpointing: every rank calls it every step.
  void after_step(int64_t step, std::ostream& out);

 private:
  void save(int64_t step, std::ostream& out);

  Session& session_;
  std::optional<CheckpointOptions> options_;
  int64_t steps_;
  uint64_t seed_;
  std::string data_;
  std::optional<formats::TokenStream> tokens_;
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
};

}  // namespace piper::engine
