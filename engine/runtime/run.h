// The training loop behind piper-run: load a plan, train for some steps,
// report per-step loss and throughput, write metrics and the trained model.
#pragma once

#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/checkpoint_schedule.h"
#include "engine/runtime/token_data.h"

namespace piper::engine {

// What a step whose global gradient norm is not finite does (piper-run --on-nonfinite).
enum class OnNonFinite {
  kStop,  // stop the run at that step on every rank (exit 3), saving nothing
  kSkip,  // leave that step's update out on every rank and train on, counting it
};

struct RunOptions {
  std::string plan_path;  // %r stands for the rank the launcher gives (RANK, SLURM_PROCID, ...)
  int64_t steps = 10;
  std::optional<std::string> data_dir;  // NAME.npy per input; synthetic data when absent
  std::optional<TokenOptions> tokens;   // token windows for the inputs it names (--tokens)
  // JSON lines, one per step. Both are written by rank 0 alone unless the path holds %r.
  std::optional<std::string> metrics_path;
  std::optional<std::string> save_onnx_path;
  // Chrome/Perfetto trace of the steps in trace_steps (1-based; empty: the last step),
  // engine/runtime/trace.h, written atomically when the run ends; rank 0 alone unless the path
  // holds %r, as the metrics.
  std::optional<std::string> trace_path;
  std::vector<int64_t> trace_steps;
  // Rank 0's progress line every this many steps (engine/runtime/progress.h); 0: none.
  int64_t log_every = 10;
  // The device's peak FLOP/s, for the metrics' "mfu"; without it the key is left out.
  std::optional<double> peak_flops;
  // Where the ranks of a multi-rank plan meet (tcp://HOST:PORT or file:///dir); the launcher's
  // environment is read when absent (engine/comm/launch_environment.h).
  std::optional<std::string> rendezvous;
  double timeout_s = 300;  // deadline of the rendezvous and of every collective
  uint64_t seed = 0;
  std::string device = "cpu";
  // Communicators between ranks: "gloo" or "nccl"; empty: default_communicator(device).
  std::string comm;
  // Runs a plan whose header names another planner build than this engine's.
  bool allow_other_planner = false;
  // Stops at the first kernel that writes a NaN or infinity, naming it (SessionOptions).
  bool check_finite = false;
  OnNonFinite on_nonfinite = OnNonFinite::kStop;
  // Sharded checkpoints (--checkpoint-dir, --save-every, --keep, --resume); with --resume,
  // `steps` is the step the run ends at.
  std::optional<CheckpointOptions> checkpoints;
};

// Trains as `options` say, printing a summary to `out`, rank 0 also one line per step
// ("step 1 loss 2.302585 grad_norm 0.4172 (0.012 s, 5333 samples/s)") there and its progress
// lines to `progress`; the other ranks print nothing per step. The metrics file is written
// to PATH.tmp as steps complete and renamed to PATH at the end, so a failed run leaves none; the
// trained model is written atomically. A plan of several ranks first meets the other ranks
// (engine/comm/rendezvous.h); when this rank fails it tells them so. Throws piper::Error on any
// failure, and Interrupted after saving the checkpoint of a run stopped by SIGTERM or SIGINT.
void run_training(const RunOptions& options, std::ostream& out, std::ostream& progress = std::cerr);

}  // namespace piper::engine
