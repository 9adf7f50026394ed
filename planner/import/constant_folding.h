// Folding of constant and shape subgraphs in an ONNX model whose input shapes
// are fixed: Shape, Constant and the Gather/Unsqueeze/Concat/arithmetic chains
// that exporters emit for dynamic batch sizes, and whatever else depends only on
// constants (position buckets, masks), become initializers. The rules, one per
// op, are in fold_rules.h.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "planner/import/constant_value.h"

namespace piper::planner {

// Initializers for which this returns false are trained and never folded through.
using IsConstantInitializer = std::function<bool(const onnx::TensorProto&)>;

// Runs shape inference and folding to a fixed point. Every folded value
// becomes an initializer whose name is added to `folded`. Returns the number
// of nodes folded away.
int fold_constants(onnx::ModelProto& model, const IsConstantInitializer& is_constant,
                   std::set<std::string>& folded);

// The value of `node`'s output from its inputs' values (null for omitted optional inputs), or
// nullopt when the folder leaves the node to the engine. Throws piper::Error "node 'N' (Op):
// ..." when the node is malformed; `index` (its position in the graph) names an unnamed node.
std::optional<ConstantValue> fold_node(const onnx::NodeProto& node,
                                       const std::vector<const ConstantValue*>& inputs,
                                       int index = 0);

// Runs ONNX shape inference, replacing earlier value_info, with data propagation (the values
// of Shape chains carried into the shapes they build) if asked. Throws piper::Error.
void infer_shapes(onnx::ModelProto& model, bool propagate_data = false);

}  // namespace piper::planner
