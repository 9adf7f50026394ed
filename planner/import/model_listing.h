// What `piper-plan --list MODEL.onnx` prints: the names a strategy's globs match, so a user
// can write "annotations" (node names) and "frozen" (initializer names) without guessing.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

namespace piper::planner {

// Every node (name as planning sees it, op type; marked when planning folds it into a
// constant, so no annotation can match it) and every initializer (name, shape, dtype).
// `model_name` heads the listing. Nodes are marked only when the model imports; otherwise
// the listing ends with why it does not.
std::string list_model(const onnx::ModelProto& model, const std::string& model_name);

}  // namespace piper::planner
