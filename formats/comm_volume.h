// The communication a rank's plan performs in one step, by kind, counted from
// its instructions (every microbatch's are in the plan), so it is what the rank
// executes. docs/cost-model.md defines the volume:
//   - a collective's volume is its buffer: for each input/output pair, the larger
//     tensor (an all-reduce's tensor, a reduce-scatter's input, an all-gather's
//     output, an all-to-all's input);
//   - what a ring sends from the rank for it: 2(n-1)/n of that for an all-reduce,
//     (n-1)/n for reduce-scatter, all-gather and all-to-all, all of it for a
//     broadcast from this rank and nothing for one to it, over a group of n;
//   - a send's volume and what it sends is its tensor; a recv's is what it receives.
// Tensors with a run-time extent count at their planned bound.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "schemas/plan.pb.h"

namespace piper::formats {

enum class CommKind { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kBroadcast, kSend, kRecv };
inline constexpr size_t kNumCommKinds = 7;

// Reshards of tensor, sequence and expert parallelism (a collective whose Instruction.task
// also has kernels, or an all-to-all: expert parallelism's run as tasks of their own on
// streams a2a_<stream>) or the instructions of comm tasks, which lower
// to their collective or transfer alone (data parallelism, ZeRO, the gradient norm,
// pipeline transfers).
enum class CommScope { kReshard, kTask };
inline constexpr size_t kNumCommScopes = 2;

struct CommTotal {
  int64_t count = 0;      // instructions
  uint64_t bytes = 0;     // their volume
  double sent_bytes = 0;  // what this rank puts on the wire for them
};

struct CommVolume {
  std::array<std::array<CommTotal, kNumCommKinds>, kNumCommScopes> totals{};

  const CommTotal& at(CommScope scope, CommKind kind) const {
    return totals[static_cast<size_t>(scope)][static_cast<size_t>(kind)];
  }
  CommTotal& at(CommScope scope, CommKind kind) {
    return totals[static_cast<size_t>(scope)][static_cast<size_t>(kind)];
  }
};

// Throws piper::Error naming the instruction when it names a tensor or group the
// plan lacks.
CommVolume comm_volume(const plan::Plan& plan);

// "all-reduce", "reduce-scatter", "all-gather", "all-to-all", "broadcast", "send", "recv".
const char* comm_kind_name(CommKind kind);

// One line: "tensor/expert-parallel all-reduce 1572864 B (1.50 MiB) in 24; data-parallel
// all-reduce ... ; send ...", kinds without instructions left out; "none" for a plan that
// does not communicate.
std::string comm_volume_line(const CommVolume& volume);

// A table, one row per scope and kind with instructions: count, volume and bytes sent.
std::string comm_volume_table(const CommVolume& volume);

}  // namespace piper::formats
