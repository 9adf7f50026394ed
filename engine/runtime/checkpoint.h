// Sharded checkpoints (docs/reliability.md): every rank writes what it owns of the parameters
// and optimizer state into one safetensors file of a step folder, rank 0 the index; the folder
// is committed by an atomic rename once every rank has written, so a kill during a save leaves
// the previous step as the latest. Loading reads each tensor's slice this rank holds from
// whichever shards hold it, verifying their checksums.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/runtime/session.h"
#include "formats/checkpoint_index.h"

namespace piper::engine {

// Where training stands, as a checkpoint records it and a resumed run continues it.
struct TrainingPosition {
  int64_t step = 0;                            // steps done
  int64_t optimizer_steps = 0;                 // updates applied
  uint64_t seed = 0;                           // of synthetic data and seeded kernels
  std::string data;                            // the batch source, for the index's readers
  std::optional<formats::TokenStream> tokens;  // the token stream, when trained on one
};

// "DIR/step-000040"
std::string step_folder(const std::string& directory, int64_t step);

// The committed step folder of the highest step in `directory`, or none when it has none (or
// does not exist).
std::optional<std::string> latest_checkpoint(const std::string& directory);

// Saves the session's state as step folder position.step of `directory` (replacing one of that
// step), then, when keep > 0, removes all but the newest `keep` committed steps. Collective:
// every rank calls it after the same step. Returns the committed folder.
std::string save_checkpoint(Session& session, const std::string& directory,
                            const TrainingPosition& position, int64_t keep);

// Loads the parameters and optimizer state of `folder` into the session and returns its
// position, after checking that it matches the plan (every tensor it holds, with its dtype and
// shape, the global batch, the seed) and every shard read against its checksum. Throws
// piper::Error naming the file or tensor at fault.
TrainingPosition load_checkpoint(Session& session, const std::string& folder, uint64_t seed);

}  // namespace piper::engine
