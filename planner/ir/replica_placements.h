// How the data-parallel replicas of a graph hold each tensor when every replica runs the graph
// on its own rows of the batch (the graph inputs' first dimension): the rows each replica holds
// of a tensor are that replica's part of the tensor one process computes from the whole batch.
// Expert parallelism reads it to place only what meets the split experts
// (directives/shard.cc); exact batch means read it to find the means over the batch's rows
// (planner/batch_means.h).
#pragma once

#include <vector>

#include "planner/ir/op_graph.h"

namespace piper::ir {

struct ReplicaRows {
  // Per tensor: the replicas' rows along a dimension (Sharded), a partial sum over their rows,
  // or Replicated (not data, or computed by ops Piper cannot follow row by row).
  std::vector<Placement> held;
  // Per tensor: computed from the batch inputs.
  std::vector<bool> data;
  // Per tensor held along a dimension: rows each replica picked by a run-time test (NonZero's
  // coordinates, and what is gathered by them), as many as it picked, which differs between
  // replicas: a mean over them is no part of the whole batch's mean.
  std::vector<bool> picked;
};

// Propagates the batch inputs' rows (Sharded(0)) through the ops' placement rules over a group
// of one (ir/placement.h), with the whole step's op order. An op whose rule would read a data
// tensor other than as the replicas hold it loses track of its outputs (Replicated).
//
// With `rows_in_any_order`, rows are followed where each replica's rows are no longer one block
// of the whole batch's (what a mean over them needs, not expert parallelism's all-to-all): a
// Concat along the rows' dimension holds every replica's rows of each input; NonZero's
// coordinates of a tensor held in blocks index the replica's own rows, and so do int64 values
// computed from them by Squeeze, Unsqueeze, Reshape, Expand, Transpose, Split, a product with a
// positive constant and a sum of two such; a Gather along the rows by such indices
// picks the replica's rows, and a ScatterElements by them writes back into its rows, as the
// dropless MoE dispatch of HF Mixtral does (torch.where, index_add_). Tensors of rows in
// different orders meet in no op.
ReplicaRows replica_placements(const OpGraph& graph, bool rows_in_any_order = false);

}  // namespace piper::ir
