// Bounded dynamic dimensions: how many tokens reach an expert (NonZero's count) is known only
// at run time, but never exceeds a bound known when planning (NonZero's input size). Memory is
// planned for the bound; a step's kernels see the extent (docs/plan-format.md). This pass
// derives which dimensions of which tensors carry which extent, from the NonZero ops outward,
// as a sharding propagation does: one rule per kind of op.
#pragma once

#include "planner/ir/op_graph.h"

namespace piper::ir {

// A dimension an importer could not size: ONNX's shape inference left it symbolic.
constexpr int64_t kUnknownDim = -1;

// Sets every tensor's `dynamic` from the NonZero ops of `graph` (each writes its count to an
// int64 scalar second output) and gives every kUnknownDim dimension its bound. Ops are visited
// in an order where producers come first. Throws piper::Error naming the op and the tensor when
// a run-time extent reaches an op that cannot carry it (a dynamic dimension it would split,
// concatenate or slice, or an op without a rule) or when a dimension stays unknown.
void infer_dynamic_dims(OpGraph& graph);

// Whether any tensor of `graph` has a dynamic dimension.
bool has_dynamic_dims(const OpGraph& graph);

// "[2, <=16 x count]": the shape with each dynamic dimension's bound, scale and extent.
std::string describe_shape(const OpGraph& graph, TensorId tensor);

}  // namespace piper::ir
