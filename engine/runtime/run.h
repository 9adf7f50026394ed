// The training loop behind piper-run: load a plan, train for some steps,
// report per-step loss and throughput, write metrics and the trained model.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace piper::engine {

struct RunOptions {
  std::string plan_path;
  int64_t steps = 10;
  std::optional<std::string> data_dir;      // NAME.npy per input; synthetic data when absent
  std::optional<std::string> metrics_path;  // JSON lines, one per step
  std::optional<std::string> save_onnx_path;
  uint64_t seed = 0;
  std::string device = "cpu";
};

// Trains as `options` say, printing a summary and one line per step to `out`
// ("step 1 loss 2.302585 (0.012 s, 5333 samples/s)"). The metrics file is written to
// PATH.tmp as steps complete and renamed to PATH at the end, so a failed run leaves none;
// the trained model is written atomically. Throws piper::Error on any failure.
void run_training(const RunOptions& options, std::ostream& out);

}  // namespace piper::engine
