// Reverse-mode differentiation of the forward op graph into pass-B ops.
#pragma once

#include <string>
#include <vector>

#include "planner/ir/op_graph.h"

namespace piper::planner {

// Appends the backward ops that compute, from a seed of ones for the loss,
// the gradient of every parameter the loss depends on, and fills
// `graph.trained`. Backward ops carry the tags of the forward op they
// differentiate. Throws piper::Error naming the node of an op without a
// gradient rule.
void differentiate(ir::OpGraph& graph);

// Forward op types the planner can train through, sorted.
std::vector<std::string> supported_op_types();

// Throws piper::Error listing every unsupported op type with its node count, first node and
// what the user can do (unsupported_ops.h), then the supported types. `model_name` prefixes
// the message.
void check_supported_ops(const ir::OpGraph& graph, const std::string& model_name);

}  // namespace piper::planner
