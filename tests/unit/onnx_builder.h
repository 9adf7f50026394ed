// Builds small ONNX models in tests without Python.
#pragma once

#include <onnx/onnx_pb.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace piper::testing {

class OnnxBuilder {
 public:
  OnnxBuilder() {
    model_.set_ir_version(8);
    auto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(17);
    model_.mutable_graph()->set_name("test");
  }

  // A graph input; a dim of -1 is the dynamic dimension "batch".
  OnnxBuilder& input(const std::string& name, std::vector<int64_t> dims,
                     int elem_type = onnx::TensorProto::FLOAT) {
    describe(model_.mutable_graph()->add_input(), name, dims, elem_type);
    return *this;
  }

  OnnxBuilder& output(const std::string& name, std::vector<int64_t> dims,
                      int elem_type = onnx::TensorProto::FLOAT) {
    describe(model_.mutable_graph()->add_output(), name, dims, elem_type);
    return *this;
  }

  OnnxBuilder& initializer(const std::string& name, std::vector<int64_t> dims,
                           const std::vector<float>& values) {
    auto* tensor = model_.mutable_graph()->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t dim : dims) tensor->add_dims(dim);
    for (float value : values) tensor->add_float_data(value);
    return *this;
  }

  OnnxBuilder& int_initializer(const std::string& name, std::vector<int64_t> dims,
                               const std::vector<int64_t>& values) {
    auto* tensor = model_.mutable_graph()->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::INT64);
    for (int64_t dim : dims) tensor->add_dims(dim);
    for (int64_t value : values) tensor->add_int64_data(value);
    return *this;
  }

  // Adds a node; returns it so attributes can be added with attr().
  onnx::NodeProto& node(const std::string& op_type, std::vector<std::string> inputs,
                        std::vector<std::string> outputs, const std::string& name = "") {
    auto* node = model_.mutable_graph()->add_node();
    node->set_op_type(op_type);
    node->set_name(name.empty() ? "/" + op_type + "_" + std::to_string(count_++) : name);
    for (const auto& in : inputs) node->add_input(in);
    for (const auto& out : outputs) node->add_output(out);
    return *node;
  }

  // A Constant node writing a float tensor, so the value is a planner constant rather than a
  // trained initializer.
  OnnxBuilder& float_constant(const std::string& name, std::vector<int64_t> dims,
                              const std::vector<float>& values) {
    auto* attr = node("Constant", {}, {name}).add_attribute();
    attr->set_name("value");
    attr->set_type(onnx::AttributeProto::TENSOR);
    auto* tensor = attr->mutable_t();
    tensor->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t dim : dims) tensor->add_dims(dim);
    for (float value : values) tensor->add_float_data(value);
    return *this;
  }

  static void attr(onnx::NodeProto& node, const std::string& name, int64_t value) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }

  static void attr(onnx::NodeProto& node, const std::string& name, float value) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }

  static void attr(onnx::NodeProto& node, const std::string& name, const std::string& value) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(value);
  }

  static void attr(onnx::NodeProto& node, const std::string& name, std::vector<int64_t> values) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }

  const onnx::ModelProto& model() const { return model_; }

 private:
  static void describe(onnx::ValueInfoProto* info, const std::string& name,
                       const std::vector<int64_t>& dims, int elem_type) {
    info->set_name(name);
    auto* tensor = info->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(elem_type);
    auto* shape = tensor->mutable_shape();
    for (int64_t dim : dims) {
      auto* d = shape->add_dim();
      if (dim < 0) {
        d->set_dim_param("batch");
      } else {
        d->set_dim_value(dim);
      }
    }
  }

  onnx::ModelProto model_;
  int count_ = 0;
};

}  // namespace piper::testing
