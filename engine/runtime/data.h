// Batch sources for training: .npy files (--data DIR) or deterministic
// synthetic data from the seed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/runtime/batch.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The global batch of 0-based step `step`: plan.global_batch() rows of every plan input.
  virtual Batch batch(int64_t step) = 0;
  // One line for logs, e.g. "synthetic data (seed 0)".
  virtual std::string describe() const = 0;
};

// Reads DIR/NAME.npy for every graph input NAME of the plan (float32 or int64, C order,
// leading dimension = samples). Step s takes rows (s * G + i) mod samples, i < G, with
// G = plan.global_batch(). Throws piper::Error naming the file when one is missing or its
// dtype or trailing dimensions differ from the plan's tensor (expected vs actual), and
// when the files hold different numbers of samples.
std::unique_ptr<BatchSource> make_npy_source(const plan::Plan& plan, const std::string& directory);

// Deterministic data from `seed`, the same in every run for a given seed and step: float
// inputs standard normal, int64 inputs uniform in [0, int_high) (0 where int_high is 0).
std::unique_ptr<BatchSource> make_synthetic_source(const plan::Plan& plan, uint64_t seed);

}  // namespace piper::engine
