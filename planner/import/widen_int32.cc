#include "planner/import/widen_int32.h"

#include "formats/error.h"
#include "planner/import/constant_value.h"

namespace piper::planner {
namespace {

constexpr int32_t kInt32 = onnx::TensorProto::INT32;
constexpr int32_t kInt64 = onnx::TensorProto::INT64;

// `tensor` (int32) as the int64 tensor of the same name and values.
void widen_tensor(onnx::TensorProto& tensor) {
  ConstantValue value;
  if (!from_tensor_proto(tensor, value)) {
    throw Error("cannot read int32 tensor '" + tensor.name() + "'");
  }
  value.data_type = kInt64;
  tensor = to_tensor_proto(value, tensor.name());
}

bool widen_node(onnx::NodeProto& node) {
  bool widened = false;
  for (auto& attribute : *node.mutable_attribute()) {
    if (node.op_type() == "Cast" && attribute.name() == "to" && attribute.i() == kInt32) {
      attribute.set_i(kInt64);
      widened = true;
    }
    // Constant's `value`, ConstantOfShape's `value`.
    if (attribute.has_t() && attribute.t().data_type() == kInt32) {
      widen_tensor(*attribute.mutable_t());
      widened = true;
    }
  }
  return widened;
}

}  // namespace

bool widen_int32(onnx::GraphProto& graph, std::set<std::string>& folded) {
  bool widened = false;
  for (auto& node : *graph.mutable_node()) {
    if (node.domain().empty() || node.domain() == "ai.onnx") widened |= widen_node(node);
  }
  for (auto& initializer : *graph.mutable_initializer()) {
    if (initializer.data_type() != kInt32) continue;
    widen_tensor(initializer);
    folded.insert(initializer.name());
    widened = true;
  }
  return widened;
}

}  // namespace piper::planner
