// Placements over a tensor-parallel group (PyTorch DTensor's Replicate, Shard(dim), Partial;
// GSPMD's sharding): how the members of a group hold one tensor, and how each op propagates
// them. The op graph is the program one member runs: a tensor's shape is one member's block.
#pragma once

#include <optional>
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

// The int64 values of a planner constant, or nullopt for a tensor computed at run time.
std::optional<std::vector<int64_t>> constant_ints(const OpGraph& graph, TensorId id);

// What `tensor` holds is placed as this: a ZeRO slice (Tensor::shard_of) is a slice of its
// whole tensor's block.
const Placement& held_placement(const OpGraph& graph, TensorId tensor);

// The whole shape of a tensor whose member block has `shape`, over `group_size` members.
Shape whole_shape(const Shape& shape, const Placement& placement, int64_t group_size);

}  // namespace piper::ir
