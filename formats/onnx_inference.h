// The inference graph of a training model (piper-export --inference): the forward graph up to
// the loss's inputs that depend on parameters (the logits), the loss and its labels removed.
#pragma once

#include <onnx/onnx_pb.h>

#include <set>
#include <string>

namespace piper::formats {

// `model`'s graph cut at `output`, or, when it is empty, at the one value the loss subgraph
// takes that depends on `parameters` (renamed "logits" unless the model has a value of that
// name). The loss is the first scalar float output, as piper-plan trains it; its labels are the
// model inputs from which no node reading a parameter is reached; the loss subgraph is what
// they reach, with the parameter-free nodes that feed only it (a reshape or shift of the
// logits). Only the nodes, inputs and initializers the output needs are kept. Throws
// piper::Error naming `model_name` and the loss node when the cut is ambiguous (no labels, or
// more than one such value), saying to pass --output NAME.
onnx::ModelProto inference_model(const onnx::ModelProto& model,
                                 const std::set<std::string>& parameters, const std::string& output,
                                 const std::string& model_name);

}  // namespace piper::formats
