// Placements over a tensor-parallel group (PyTorch DTensor's Replicate, Shard(dim), Partial;
// GSPMD's sharding): how the members of a group hold one tensor, and how each op propagates
// them. The op graph is the program one member runs: a tensor's shape is one member's block.
#pragma once

#include <string>
#include <vector>

#include "planner/ir/op_graph.h"

namespace piper::ir {

// What an op needs of its inputs (in order; omitted inputs are Replicated) and gives its
// outputs, per member of the group.
struct OpPlacement {
  std::vector<Placement> inputs;
  std::vector<Placement> outputs;
};

// The placements under which `op` computes its part on every member, given its inputs'
// current placements (`given`, in order; Replicated for omitted inputs) and every tensor's
// whole shape (`whole`, indexed by tensor id), over a group of `group_size` members. An input whose
// needed placement differs from its given one is resharded by the caller. Every rule keeps the op's
// meaning: replicated inputs always give replicated outputs, and an op without a rule reads its
// inputs whole. Where an op could place its outputs several ways at equal cost,
// `preferred_outputs` (if given) breaks the tie.
OpPlacement place_op(const OpGraph& graph, const Op& op, const std::vector<Placement>& given,
                     const std::vector<Shape>& whole, int64_t group_size,
                     const std::vector<Placement>* preferred_outputs = nullptr);

// How the data-parallel replicas of `graph` hold each tensor (indexed by id) when every
// replica runs it on its own rows of the batch, the graph inputs' first dimension: their rows
// along a dimension (Sharded), a partial sum over their rows, or Replicated (not data, or an
// op no rule places). With `rows_in_any_order`, a Concat along the rows' dimension keeps them
// there though each replica's rows are no longer one block (what a mean over them needs).
struct ReplicaRows {
  std::vector<Placement> held;  // per tensor
  std::vector<bool> data;       // per tensor: computed from the batch inputs
};
ReplicaRows replica_placements(const OpGraph& graph, bool rows_in_any_order = false);

// What `tensor` holds is placed as this: a ZeRO slice (Tensor::shard_of) is a slice of its
// whole tensor's block.
const Placement& held_placement(const OpGraph& graph, TensorId tensor);

// The whole shape of a tensor whose member block has `shape`, over `group_size` members.
Shape whole_shape(const Shape& shape, const Placement& placement, int64_t group_size);

}  // namespace piper::ir
