// Expert parallelism's exchanges as tasks of their own, on a communication stream beside the
// compute stream of the task that held them: the dispatch and combine all-to-alls of batched
// experts (piper.AllToAll over the replicas, directives/shard.cc) and the dropless all-to-all-v
// and its return (directives/expert_modules.h). An exchange waits for its peers to reach the
// same exchange; on a stream of its own it does so while the device's other compute stream runs
// the paired microbatch (DualPipe's overlapped forward and backward, DeepSeek-V3's overlap of
// the expert all-to-all with the other microbatch's computation), and the buffers it moves are
// kept apart from that stream's (lower.cc, concurrent tasks).
//
// The step simulation prices a task with its exchanges as one unit, the exchanges as reshards
// that the overlapped partner's kernels hide (sim/cost_model.h, pair_seconds), which is what
// running them on their own stream does; so the cost model simulates the DAG before this cut
// and lowering runs the DAG after it.
#pragma once

#include <string>

#include "planner/ir/task_graph.h"

namespace piper::planner {

// The stream an expert exchange cut from a task on `stream` runs on: "a2a_compute" for
// "compute".
std::string exchange_stream(const std::string& stream);

// Whether a compute task of `graph` holds an expert exchange.
bool has_expert_exchanges(const ir::TaskGraph& graph);

// Cuts every compute task around each expert exchange it holds (directives/backward_split.h,
// cut_task): each exchange becomes a task of its own, with the task's tags, pass, microbatch
// and devices, on exchange_stream(task.stream); the ops before and after it stay on the task's
// stream. Each exchange first moves as early as what it reads allows: only the ops it needs
// precede it, the others (a backward's weight gradients) follow it, so that its wait for the
// peer falls under the overlapped partner's computation, not after the partner has finished. A
// gradient reduced over the replicas (a split bias's, summed from the rows), with the ops that
// read only it, moves last and runs after the task's last computation on the exchange stream,
// where only what reads it waits for it. Edges follow the tensors the parts read and write; the
// task's temporal edges (its order) stay on its first and last compute parts. The parts of an
// overlapped pair's two tasks (sim/overlapped_pairs.h) run free of each other: made to take turns
// (a part of one, then a part of the other), an exchange waiting for a late peer held back both
// of the rank's streams, and on the CPU the pairs hid less of their exchanges and stepped slower
// (bench/README.md, dualpipe_overlap.py). Task ids do not change; the parts are appended. Returns
// the number of exchanges separated.
int separate_expert_exchanges(ir::TaskGraph& graph);

}  // namespace piper::planner
