// Batch sources for training: .npy files (--data DIR), token windows of a token file
// (--tokens, engine/runtime/token_data.h), or deterministic synthetic data from the seed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/batch.h"
#include "formats/checkpoint_index.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The global batch of 0-based step `step`: plan.global_batch() rows of every plan input.
  // Only the rows this rank reads are filled (those it feeds, and every row of an input whose
  // labels it counts); the others are zero.
  virtual Batch batch(int64_t step) = 0;
  // One line for logs, e.g. "synthetic data (seed 0)".
  virtual std::string describe() const = 0;
  // The token stream it draws windows from (--tokens), which a checkpoint records.
  virtual std::optional<formats::TokenStream> token_stream() const { return std::nullopt; }
};

// Maps DIR/NAME.npy for every graph input NAME of the plan (float32, int64 or bool, C order,
// leading dimension = samples). Step s takes rows (s * G + i) mod samples, i < G, with
// G = plan.global_batch(). Throws piper::Error naming the file when one is missing or its
// dtype or trailing dimensions differ from the plan's tensor (expected vs actual), and
// when the files hold different numbers of samples. Only the rows the rank reads are read from
// disk, and their pages leave the resident set again: memory does not grow with the files.
std::unique_ptr<BatchSource> make_npy_source(const plan::Plan& plan, const std::string& directory);

// Deterministic data from `seed`, the same in every run for a given seed and step: float
// inputs standard normal, int64 inputs uniform in [0, int_high) (0 where int_high is 0).
std::unique_ptr<BatchSource> make_synthetic_source(const plan::Plan& plan, uint64_t seed);

struct TokenOptions;

// Where piper-run's batches come from: token windows for the inputs --token-inputs names, NAME.npy
// of --data for the others, synthetic data from `seed` when neither flag is given.
struct DataOptions {
  std::optional<std::string> data_dir;
  const TokenOptions* tokens = nullptr;
  uint64_t seed = 0;
};

// Throws piper::Error when an input is fed by both --tokens and --data (DIR holds NAME.npy for
// a token input) or, with --tokens, a plan input is fed by neither.
std::unique_ptr<BatchSource> make_batch_source(const plan::Plan& plan, const DataOptions& options);

}  // namespace piper::engine
