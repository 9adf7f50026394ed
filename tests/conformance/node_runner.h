// Runs an ONNX node test through a Piper Backend the way a plan would: each node becomes a
// plan::Kernel (same op type, ONNX attributes converted to plan attributes), its tensors are
// allocated by the backend, inputs uploaded, output shapes taken from what the plan would
// know (the expected outputs, or shape inference for intermediate values), and outputs
// downloaded after run(). Multi-node models run node by node in graph order with
// intermediate values held on the host. Constant, Shape and Size nodes are folded on the
// host, as a plan holds them as constants (folded_on_host()).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "engine/runtime/backend.h"
#include "tests/conformance/test_case.h"

namespace piper::conformance {

// Why Piper's plan cannot express `node` (an attribute type with no plan equivalent); empty
// when it can. Constant nodes are checked for a value the host can fold.
std::string node_problem(const onnx::NodeProto& node);

// The plan kernel for `node`: attributes INT->i, FLOAT->f, STRING->s, INTS->ints,
// FLOATS->floats, and a one-element TENSOR -> i (integer and bool dtypes) or f (FLOAT).
// Kernel inputs/outputs are numbered in order, -1 for omitted optional ones. Throws
// piper::Error for attributes node_problem() reports.
plan::Kernel kernel_from_node(const onnx::NodeProto& node);

// Runs one data set of `test` and returns the graph outputs in order. Throws piper::Error
// naming the node when a kernel fails to prepare or run.
std::vector<HostTensor> run_data_set(engine::Backend& backend, const TestCase& test,
                                     const DataSet& data);

}  // namespace piper::conformance
