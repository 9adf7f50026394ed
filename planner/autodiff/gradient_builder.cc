#include "planner/autodiff/gradient_builder.h"

#include <cstring>

#include "formats/error.h"
#include "planner/precision/precision.h"

namespace piper::planner {

std::string GradientBuilder::fresh_name(const std::string& stem) {
  return op().name + "/grad/" + stem + std::to_string(emitted_++);
}

ir::TensorId GradientBuilder::emit(const std::string& type, std::vector<ir::TensorId> inputs,
                                   const ir::Shape& shape, ir::Attributes attributes) {
  ir::Tensor tensor;
  tensor.name = fresh_name(type + ":");
  tensor.dtype = float_dtype_of(inputs);
  tensor.shape = shape;
  const ir::TensorId output = graph_.add_tensor(std::move(tensor));
  ir::Op op;
  op.type = type;
  op.name = graph_.tensor(output).name;
  op.inputs = std::move(inputs);
  op.outputs = {output};
  op.attributes = std::move(attributes);
  op.pass = ir::Pass::kBackward;
  op.tags = forward_.tags;
  graph_.add_op(std::move(op));
  return output;
}

std::vector<ir::TensorId> GradientBuilder::emit_multi(
    const std::string& type, std::vector<ir::TensorId> inputs,
    const std::vector<std::optional<ir::Shape>>& shapes, ir::Attributes attributes) {
  ir::Op op;
  op.type = type;
  op.name = fresh_name(type + ":");
  for (const auto& shape : shapes) {
    if (!shape) {
      op.outputs.push_back(-1);
      continue;
    }
    ir::Tensor tensor;
    tensor.name = op.name + "/" + std::to_string(op.outputs.size());
    tensor.dtype = float_dtype_of(inputs);
    tensor.shape = *shape;
    op.outputs.push_back(graph_.add_tensor(std::move(tensor)));
  }
  op.inputs = std::move(inputs);
  op.attributes = std::move(attributes);
  op.pass = ir::Pass::kBackward;
  op.tags = forward_.tags;
  const std::vector<ir::TensorId> outputs = op.outputs;
  graph_.add_op(std::move(op));
  return outputs;
}

ir::TensorId GradientBuilder::cast(ir::TensorId tensor, ir::DType dtype) {
  if (graph_.tensor(tensor).dtype == dtype) return tensor;
  const ir::OpId producer = graph_.producer(tensor);
  if (dtype == ir::DType::kFloat32 && producer >= 0 && graph_.consumers(tensor).empty() &&
      sums_in_float32(graph_.op(producer).type)) {
    graph_.tensor(tensor).dtype = dtype;
    return tensor;
  }
  const ir::TensorId output =
      emit("Cast", {tensor}, graph_.tensor(tensor).shape, {{"to", ir::onnx_data_type(dtype)}});
  graph_.tensor(output).dtype = dtype;
  return output;
}

ir::DType GradientBuilder::float_dtype_of(const std::vector<ir::TensorId>& inputs) const {
  for (ir::TensorId input : inputs) {
    if (input >= 0 && graph_.tensor(input).dtype == ir::DType::kBFloat16) {
      return ir::DType::kBFloat16;
    }
  }
  return ir::DType::kFloat32;
}

ir::TensorId GradientBuilder::ensure_output(size_t index, const std::string& stem, ir::DType dtype,
                                            const ir::Shape& shape) {
  if (index < forward_.outputs.size() && forward_.outputs[index] >= 0) {
    return forward_.outputs[index];
  }
  ir::Tensor tensor;
  tensor.name = forward_.name + "/" + stem;
  tensor.dtype = dtype;
  tensor.shape = shape;
  const ir::TensorId id = graph_.add_tensor(std::move(tensor));
  if (forward_.outputs.size() <= index) forward_.outputs.resize(index + 1, -1);
  forward_.outputs[index] = id;
  graph_.op(forward_id_).outputs = forward_.outputs;
  return id;
}

ir::TensorId GradientBuilder::constant(float value) {
  ir::Tensor tensor;
  tensor.name = fresh_name("const:");
  tensor.role = ir::Role::kConstant;
  tensor.data.resize(sizeof(float));
  std::memcpy(tensor.data.data(), &value, sizeof(float));
  return graph_.add_tensor(std::move(tensor));
}

ir::TensorId GradientBuilder::constant(const std::vector<int64_t>& values) {
  ir::Tensor tensor;
  tensor.name = fresh_name("const:");
  tensor.dtype = ir::DType::kInt64;
  tensor.shape = {static_cast<int64_t>(values.size())};
  tensor.role = ir::Role::kConstant;
  tensor.data.resize(values.size() * sizeof(int64_t));
  std::memcpy(tensor.data.data(), values.data(), tensor.data.size());
  return graph_.add_tensor(std::move(tensor));
}

std::vector<int64_t> GradientBuilder::constant_ints(ir::TensorId id) const {
  const ir::Tensor& tensor = graph_.tensor(id);
  if (tensor.role != ir::Role::kConstant || tensor.dtype != ir::DType::kInt64 ||
      tensor.data.empty()) {
    throw Error("node '" + op().name + "': input '" + tensor.name +
                "' must be a constant int64 tensor (it is computed at run time)");
  }
  std::vector<int64_t> values(tensor.data.size() / sizeof(int64_t));
  std::memcpy(values.data(), tensor.data.data(), tensor.data.size());
  return values;
}

ir::TensorId GradientBuilder::sum_to_input(ir::TensorId gradient, size_t index) {
  const ir::Shape target = input_shape(index);
  if (shape(gradient) == target) return gradient;
  return emit("piper.SumTo", {gradient}, target);
}

void GradientBuilder::contribute(size_t index, ir::TensorId gradient) {
  if (wants(index)) contributions_.emplace_back(index, gradient);
}

}  // namespace piper::planner
