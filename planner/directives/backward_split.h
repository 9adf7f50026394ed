// Splits a backward task into its input-gradient part (BI: what earlier
// layers wait for) and its weight-gradient part (BW: parameter gradients,
// which nothing else in backward needs), as zero-bubble schedules do. The
// `order` directive applies it to the backward tasks its filters name with
// BI or BW.
#pragma once

#include <vector>

#include "planner/ir/task_graph.h"

namespace piper::planner {

// Replaces each backward task of `ids` by a BI task with the ops that carry
// input gradients and a BW task with those only parameter gradients need
// (either may be absent when empty); edges follow the tensors each part
// reads and writes. Task ids change (TaskGraph::remove_tasks).
void split_backward(ir::TaskGraph& graph, const std::vector<ir::TaskId>& ids);

}  // namespace piper::planner
