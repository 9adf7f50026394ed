#include "tests/conformance/node_runner.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <variant>

#include "formats/error.h"

namespace piper::conformance {
namespace {

using Scalar = std::variant<int64_t, double>;

// The single value of a one-element TensorProto: integers and bools as int64, FLOAT and
// DOUBLE as double; nullopt for other sizes or dtypes.
std::optional<Scalar> tensor_scalar(const onnx::TensorProto& t) {
  int64_t elements = 1;
  for (int64_t d : t.dims()) elements *= d;
  if (elements != 1 || t.data_location() == onnx::TensorProto::EXTERNAL) {
    return std::nullopt;
  }
  const std::string& raw = t.raw_data();
  auto from_raw = [&raw](auto value) -> std::optional<decltype(value)> {
    if (raw.size() != sizeof(value)) return std::nullopt;
    std::memcpy(&value, raw.data(), sizeof(value));
    return value;
  };
  auto widen = [](auto value) -> std::optional<Scalar> {
    if (!value) return std::nullopt;
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(*value)>>) {
      return Scalar(static_cast<double>(*value));
    } else {
      return Scalar(static_cast<int64_t>(*value));
    }
  };
  auto typed = [](const auto& field) -> std::optional<std::decay_t<decltype(field[0])>> {
    if (field.size() != 1) return std::nullopt;
    return field[0];
  };
  const bool has_raw = t.has_raw_data();
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      return has_raw ? widen(from_raw(0.0f)) : widen(typed(t.float_data()));
    case onnx::TensorProto::DOUBLE:
      return has_raw ? widen(from_raw(0.0)) : widen(typed(t.double_data()));
    case onnx::TensorProto::INT64:
      return has_raw ? widen(from_raw(int64_t{0})) : widen(typed(t.int64_data()));
    case onnx::TensorProto::INT32:
      return has_raw ? widen(from_raw(int32_t{0})) : widen(typed(t.int32_data()));
    case onnx::TensorProto::INT16:
      return has_raw ? widen(from_raw(int16_t{0})) : widen(typed(t.int32_data()));
    case onnx::TensorProto::INT8:
      return has_raw ? widen(from_raw(int8_t{0})) : widen(typed(t.int32_data()));
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL:
      return has_raw ? widen(from_raw(uint8_t{0})) : widen(typed(t.int32_data()));
    default:
      return std::nullopt;
  }
}

std::string attribute_type_name(const onnx::AttributeProto& attr) {
  return onnx::AttributeProto::AttributeType_Name(attr.type());
}

HostTensor constant_value(const onnx::NodeProto& node) {
  for (const auto& attr : node.attribute()) {
    HostTensor host;
    if (attr.name() == "value") {
      return decode_tensor(attr.t());
    } else if (attr.name() == "value_float" || attr.name() == "value_floats") {
      host.dtype = plan::FLOAT32;
      std::vector<float> values(attr.floats().begin(), attr.floats().end());
      if (attr.name() == "value_float") {
        values = {attr.f()};
      } else {
        host.shape = {static_cast<int64_t>(values.size())};
      }
      host.bytes.resize(values.size() * sizeof(float));
      std::memcpy(host.bytes.data(), values.data(), host.bytes.size());
      return host;
    } else if (attr.name() == "value_int" || attr.name() == "value_ints") {
      host.dtype = plan::INT64;
      std::vector<int64_t> values(attr.ints().begin(), attr.ints().end());
      if (attr.name() == "value_int") {
        values = {attr.i()};
      } else {
        host.shape = {static_cast<int64_t>(values.size())};
      }
      host.bytes.resize(values.size() * sizeof(int64_t));
      std::memcpy(host.bytes.data(), values.data(), host.bytes.size());
      return host;
    }
  }
  throw Error("Constant node '" + node.name() + "' has no value Piper can fold");
}

// A Shape or Size node's value for an input already on the host.
HostTensor shape_value(const onnx::NodeProto& node, const std::map<std::string, HostTensor>& values,
                       const std::string& where) {
  const auto found = values.find(node.input(0));
  if (found == values.end()) {
    throw Error(where + "input '" + node.input(0) + "' is not produced by an earlier node");
  }
  return shape_node_value(node, found->second.shape);
}

// Device memory for one tensor, released with the owner.
class DeviceTensor {
 public:
  DeviceTensor(engine::Backend& backend, plan::DType dtype, engine::Shape shape)
      : backend_(backend) {
    view_.dtype = dtype;
    view_.shape = std::move(shape);
    view_.data = backend_.allocate(view_.bytes());
  }
  ~DeviceTensor() { backend_.release(view_.data); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  const engine::TensorView& view() const { return view_; }

 private:
  engine::Backend& backend_;
  engine::TensorView view_;
};

// "node 3 (Exp 'name'): " for a node of a multi-node model, for errors; nothing for a
// single node (kernel errors already name the op).
std::string describe(const onnx::NodeProto& node, int index, int count) {
  if (count == 1) return "";
  return "node " + std::to_string(index) + " (" + node.op_type() +
         (node.name().empty() ? "" : " '" + node.name() + "'") + "): ";
}

}  // namespace

std::string node_problem(const onnx::NodeProto& node) {
  if (node.op_type() == "Constant") {
    for (const auto& attr : node.attribute()) {
      if (attr.name() == "value") {
        if (!piper_dtype(attr.t().data_type())) {
          return "Constant of dtype " + onnx_type_name(attr.t().data_type());
        }
        return "";
      }
      if (attr.name() == "value_float" || attr.name() == "value_floats" ||
          attr.name() == "value_int" || attr.name() == "value_ints") {
        return "";
      }
    }
    return "Constant without a tensor, float or int value";
  }
  for (const auto& attr : node.attribute()) {
    switch (attr.type()) {
      case onnx::AttributeProto::INT:
      case onnx::AttributeProto::FLOAT:
      case onnx::AttributeProto::STRING:
      case onnx::AttributeProto::INTS:
      case onnx::AttributeProto::FLOATS:
        break;
      case onnx::AttributeProto::TENSOR:
        if (!tensor_scalar(attr.t())) {
          return "attribute '" + attr.name() + "' is a TENSOR that is not a one-element " +
                 "integer, bool or float tensor";
        }
        break;
      default:
        return "attribute '" + attr.name() + "' of type " + attribute_type_name(attr) +
               " has no plan equivalent";
    }
  }
  return "";
}

plan::Kernel kernel_from_node(const onnx::NodeProto& node) {
  if (const std::string problem = node_problem(node); !problem.empty()) {
    throw Error(node.op_type() + ": " + problem);
  }
  plan::Kernel kernel;
  kernel.set_op_type(node.op_type());
  for (const auto& attr : node.attribute()) {
    plan::Attribute& out = *kernel.add_attributes();
    out.set_name(attr.name());
    switch (attr.type()) {
      case onnx::AttributeProto::INT:
        out.set_i(attr.i());
        break;
      case onnx::AttributeProto::FLOAT:
        out.set_f(static_cast<double>(attr.f()));
        break;
      case onnx::AttributeProto::STRING:
        out.set_s(attr.s());
        break;
      case onnx::AttributeProto::INTS:
        out.mutable_ints()->mutable_values()->Add(attr.ints().begin(), attr.ints().end());
        break;
      case onnx::AttributeProto::FLOATS:
        for (float f : attr.floats()) out.mutable_floats()->add_values(f);
        break;
      default: {  // TENSOR, checked by node_problem()
        const Scalar value = *tensor_scalar(attr.t());
        if (std::holds_alternative<int64_t>(value)) {
          out.set_i(std::get<int64_t>(value));
        } else {
          out.set_f(std::get<double>(value));
        }
      }
    }
  }
  for (int i = 0; i < node.input_size(); ++i) kernel.add_inputs(node.input(i).empty() ? -1 : i);
  for (int i = 0; i < node.output_size(); ++i) {
    kernel.add_outputs(node.output(i).empty() ? -1 : i);
  }
  return kernel;
}

std::vector<HostTensor> run_data_set(engine::Backend& backend, const TestCase& test,
                                     const DataSet& data) {
  const auto& graph = test.model.graph();
  std::map<std::string, HostTensor> values;
  for (const auto& initializer : graph.initializer()) {
    values[initializer.name()] = decode_tensor(initializer);
  }
  const auto inputs = fed_inputs(test.model);
  if (data.inputs.size() > inputs.size()) {
    throw Error(data.name + " has " + std::to_string(data.inputs.size()) +
                " inputs but the graph takes " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < data.inputs.size(); ++i) values[inputs[i]->name()] = data.inputs[i];
  if (data.outputs.size() != static_cast<size_t>(graph.output_size())) {
    throw Error(data.name + " has " + std::to_string(data.outputs.size()) +
                " expected outputs but the graph has " + std::to_string(graph.output_size()));
  }
  std::map<std::string, const HostTensor*> expected;
  for (int i = 0; i < graph.output_size(); ++i) expected[graph.output(i).name()] = &data.outputs[i];

  for (int index = 0; index < graph.node_size(); ++index) {
    const onnx::NodeProto& node = graph.node(index);
    const std::string where = describe(node, index, graph.node_size());
    if (folded_on_host(node, graph)) {
      values[node.output(0)] =
          node.op_type() == "Constant" ? constant_value(node) : shape_value(node, values, where);
      continue;
    }
    std::vector<std::unique_ptr<DeviceTensor>> owned;
    std::vector<engine::TensorView> in_views;
    for (const auto& name : node.input()) {
      if (name.empty()) {
        in_views.emplace_back();
        continue;
      }
      const auto found = values.find(name);
      if (found == values.end()) {
        throw Error(where + "input '" + name + "' is not produced by an earlier node");
      }
      const HostTensor& host = found->second;
      owned.push_back(std::make_unique<DeviceTensor>(backend, host.dtype, host.shape));
      backend.upload(owned.back()->view().data, host.bytes.data(), host.bytes.size());
      in_views.push_back(owned.back()->view());
    }
    std::vector<engine::TensorView> out_views;
    for (const auto& name : node.output()) {
      std::optional<ValueType> type;
      if (const auto e = expected.find(name); e != expected.end()) {
        type = ValueType{e->second->dtype, e->second->shape};
      } else if (const auto i = data.intermediates.find(name); i != data.intermediates.end()) {
        type = i->second;
      }
      if (name.empty() || !type) {  // omitted, or an unused output the plan would drop
        out_views.emplace_back();
        continue;
      }
      owned.push_back(std::make_unique<DeviceTensor>(backend, type->dtype, type->shape));
      out_views.push_back(owned.back()->view());
    }
    try {
      const plan::Kernel kernel = kernel_from_node(node);
      auto prepared = backend.prepare(kernel, in_views, out_views);
      prepared->run(engine::StepContext{});
    } catch (const std::exception& error) {
      throw Error(where + error.what());
    }
    for (int i = 0; i < node.output_size(); ++i) {
      const engine::TensorView& view = out_views[i];
      if (!view.present()) continue;
      HostTensor host{view.dtype, view.shape, std::vector<uint8_t>(view.bytes())};
      backend.download(host.bytes.data(), view.data, host.bytes.size());
      values[node.output(i)] = std::move(host);
    }
  }
  std::vector<HostTensor> outputs;
  for (const auto& output : graph.output()) {
    const auto found = values.find(output.name());
    if (found == values.end()) {
      throw Error("graph output '" + output.name() + "' is produced by no node");
    }
    outputs.push_back(found->second);
  }
  return outputs;
}

}  // namespace piper::conformance
