// Piper's integers are int64. Exporters write int32 arithmetic inside models users cannot
// change (HF RoBERTa's position ids: Cast(to=INT32), CumSum, Mul, Cast(to=INT64); PyTorch's
// CumSum axis), so the importer computes those values in int64: the same values wherever
// int32 would not overflow, which indices, counts and positions never do.
#pragma once

#include <onnx/onnx_pb.h>

#include <set>
#include <string>

namespace piper::planner {

// Rewrites the model's int32 computation to int64: Cast and ConstantOfShape producing int32
// produce int64, int32 Constant nodes hold int64, and int32 initializers become int64 planner
// constants (their names added to `folded`, so the plan carries their widened values rather
// than the engine reading the file's int32 bytes). Graph inputs and outputs keep their types
// (an int32 input is the user's data: the importer refuses it, naming the fix). Run after
// constant folding (which folds int32 constants as int32 does, wrapping) and before shape
// inference runs again, which then types every value computed from them int64. Returns
// whether anything changed.
bool widen_int32(onnx::GraphProto& graph, std::set<std::string>& folded);

}  // namespace piper::planner
