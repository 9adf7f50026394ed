#include "planner/import/fold_rules.h"

#include "formats/error.h"

namespace piper::planner::fold {

bool too_large(const std::vector<int64_t>& shape) { return checked_product(shape) > kMaxElements; }

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attr : node.attribute()) {
    if (attr.name() == name) return &attr;
  }
  return nullptr;
}

int64_t int_attr(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const auto* attr = find_attr(node, name);
  return attr ? attr->i() : fallback;
}

const ConstantValue& input(const Inputs& in, size_t i) {
  if (i >= in.size() || !in[i]) throw Error("input " + std::to_string(i) + " is missing");
  return *in[i];
}

std::vector<int64_t> int_elements(const ConstantValue& value, const std::string& what) {
  if (!value.is_integer()) throw Error(what + " must be an integer tensor");
  return value.ints;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what) {
  if (axis < -rank || axis >= rank) {
    throw Error(what + " " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

}  // namespace piper::planner::fold
