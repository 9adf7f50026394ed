// Splits a backward task into its input-gradient part (BI: what earlier
// layers wait for) and its weight-gradient part (BW: parameter gradients,
// which nothing else in backward needs), as zero-bubble schedules do. The
// `order` directive applies it to the backward tasks its filters name with
// BI or BW. `replicate` cuts a backward task into consecutive parts where a
// gradient bucket becomes ready, so that its all-reduce starts while the rest
// of the backward runs (as PyTorch DDP overlaps).
#pragma once

#include <vector>

#include "planner/ir/task_graph.h"

namespace piper::planner {

// Replaces each backward task of `ids` by a BI task with the ops that carry
// input gradients and a BW task with those only parameter gradients need
// (either may be absent when empty); edges follow the tensors each part
// reads and writes. Task ids change (TaskGraph::remove_tasks).
void split_backward(ir::TaskGraph& graph, const std::vector<ir::TaskId>& ids);

// Cuts task `id` after each of its op positions `ends` (ascending, each < its last): `id`
// keeps the ops up to the first cut and new tasks, appended in order, take the rest; each part
// runs after the one before, and a data edge joins each part to every earlier one whose
// tensors it reads. Edges out of `id` also leave every part that writes what they
// carry (the last part for edges that carry nothing, or with `detached_tail` the one before
// it: then only what reads the last part's tensors waits for it); data edges into `id` also
// reach every part that reads what they carry.
// Task ids do not change. Returns the parts, `id` first.
std::vector<ir::TaskId> cut_task(ir::TaskGraph& graph, ir::TaskId id,
                                 const std::vector<size_t>& ends, bool detached_tail = false);

}  // namespace piper::planner
