// Overlapped pairs: two compute tasks that one `order` group binds together on a device
// (DualPipe's forward of one microbatch with the backward of another, on streams compute and
// compute2). The order directive adds temporal edges from every task of group i to every task
// of group i+1, so the two members of a group of two have the same compute predecessors and
// successors among the device's tasks, and no edge between them; the step simulation runs
// such a pair as one unit sharing the device's compute (docs/cost-model.md, "Overlapped
// pairs").
#pragma once

#include <utility>
#include <vector>

#include "planner/ir/task_graph.h"

namespace piper::planner::sim {

struct OverlappedPair {
  ir::TaskId first = -1;  // the one earlier in the DAG's topological order
  ir::TaskId second = -1;
};

// Every pair of compute tasks (not updates) on the same set of devices (as replicas in any
// order: each device runs its own replica of both) and different streams whose
// temporal predecessors and successors among the compute tasks on those devices are the same,
// not both empty, and that no path of edges joins; other tasks may share those only on the
// stream of one of the two and following it by a path of edges (ZeRO-2's accumulation of a
// gradient bucket after its reduce-scatter, bound by the same order group: they are no part
// of the pair). Ordered by their first member's place in the topological order.
std::vector<OverlappedPair> overlapped_pairs(const ir::TaskGraph& graph);

}  // namespace piper::planner::sim
