// Rebuilding a forward op graph from a new list of ops, shared by the fusion pass and the
// simplifications that run before and after its rules.
#pragma once

#include <utility>
#include <vector>

#include "planner/ir/op_graph.h"

namespace piper::planner {

struct KeptOp {
  ir::Op op;
  // Planner constants `op` reads that the graph lacks: (input index, tensor).
  std::vector<std::pair<size_t, ir::Tensor>> new_constants;
};

// The graph of `ops`, in order, over `graph`'s tensors. Only the tensors an op reads or writes,
// the graph inputs and the loss stay (renumbered, in their original order); each new constant
// is added and read at its input index.
ir::OpGraph rebuild(const ir::OpGraph& graph, std::vector<KeptOp> ops);

}  // namespace piper::planner
