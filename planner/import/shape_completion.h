// Output shapes that ONNX's shape inference (1.12) leaves partly unknown but
// Piper can compute from static input shapes and constant inputs: Einsum (from
// its equation; ONNX infers only the rank) and OneHot (from a constant depth).
#pragma once

#include <onnx/onnx_pb.h>

namespace piper::planner {

// Writes the completed shapes into the graph's value_info; returns how many outputs it
// completed (0 when nothing was left to do). Throws piper::Error naming the node for an
// equation that does not fit its operands.
int complete_shapes(onnx::ModelProto& model);

}  // namespace piper::planner
