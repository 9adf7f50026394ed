// Dropout's mask key in the plan (plan.proto's DropoutKey): the node's id and where a kernel
// instance's elements lie in the whole tensor of a step, so that the engine draws every
// element's mask bit alike on one process and under any layout.
#pragma once

#include "planner/ir/op_graph.h"
#include "planner/ir/placement.h"
#include "planner/ir/replica_placements.h"
#include "schemas/plan.pb.h"

namespace piper::planner {

// Where one kernel instance runs: its place in its tensor-parallel group, and its place among
// the step's instances, replica-major (replica k, microbatch m: k * microbatches + m), as the
// batch inputs take their rows (Plan.inputs).
struct InstancePlace {
  int member = 0;
  int parts = 1;
  int instance = 0;
  int instances = 1;
};

// The key of Dropout `op`. Its data's block over the tensor-parallel group (a dimension of
// `parts`) and its rows of the batch (`rows`, ir::replica_placements, a dimension of
// `instances`) place it in the whole tensor. Throws naming the node where they cannot: a partial
// sum, or a block of the group and of the batch along one dimension.
plan::DropoutKey dropout_key(const ir::OpGraph& graph, const ir::Op& op,
                             const ir::ReplicaRows& rows, const InstancePlace& place);

}  // namespace piper::planner
