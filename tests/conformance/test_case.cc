#include "tests/conformance/test_case.h"

#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "formats/error.h"
#include "formats/onnx_model.h"

namespace piper::conformance {
namespace fs = std::filesystem;

std::optional<plan::DType> piper_dtype(int32_t onnx_type) {
  switch (onnx_type) {
    case onnx::TensorProto::FLOAT:
      return plan::FLOAT32;
    case onnx::TensorProto::INT64:
      return plan::INT64;
    case onnx::TensorProto::BOOL:
      return plan::BOOL;
    default:
      return std::nullopt;
  }
}

std::string onnx_type_name(int32_t onnx_type) {
  if (onnx::TensorProto::DataType_IsValid(onnx_type)) {
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(onnx_type));
  }
  return "data type " + std::to_string(onnx_type);
}

HostTensor decode_tensor(const onnx::TensorProto& tensor) {
  const auto dtype = piper_dtype(tensor.data_type());
  if (!dtype) {
    throw Error("tensor '" + tensor.name() + "' has dtype " + onnx_type_name(tensor.data_type()) +
                ", which Piper does not have");
  }
  HostTensor host;
  host.dtype = *dtype;
  host.shape.assign(tensor.dims().begin(), tensor.dims().end());
  host.bytes = formats::initializer_bytes(tensor);
  const size_t expected =
      static_cast<size_t>(engine::num_elements(host.shape)) * engine::dtype_size(host.dtype);
  if (host.bytes.size() != expected) {
    throw Error("tensor '" + tensor.name() + "' of shape " + engine::shape_string(host.shape) +
                " holds " + std::to_string(host.bytes.size()) + " bytes, expected " +
                std::to_string(expected));
  }
  return host;
}

namespace {

onnx::ModelProto read_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto model;
  if (!in || !model.ParseFromIstream(&in)) {
    throw Error("cannot read ONNX model '" + path + "'");
  }
  return model;
}

onnx::TensorProto read_tensor(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::TensorProto tensor;
  if (!in || !tensor.ParseFromIstream(&in)) {
    throw Error("cannot read TensorProto '" + path.string() + "'");
  }
  return tensor;
}

// Reads prefix_0.pb, prefix_1.pb, ... from `dir` until one is missing. A tensor Piper cannot
// represent sets `unsupported` (once) and is left empty.
void read_tensors(const fs::path& dir, const std::string& prefix, std::vector<HostTensor>& values,
                  std::vector<std::string>& names, std::string& unsupported) {
  for (int k = 0;; ++k) {
    const fs::path path = dir / (prefix + "_" + std::to_string(k) + ".pb");
    if (!fs::exists(path)) {
      return;
    }
    const onnx::TensorProto tensor = read_tensor(path);
    names.push_back(tensor.name());
    if (!piper_dtype(tensor.data_type())) {
      if (unsupported.empty()) {
        unsupported = "dtype " + onnx_type_name(tensor.data_type()) + " (" + prefix + "_" +
                      std::to_string(k) + ")";
      }
      values.emplace_back();
      continue;
    }
    values.push_back(decode_tensor(tensor));
  }
}

// Why a graph value's declared type keeps Piper from running the case; empty when it does not.
std::string type_problem(const onnx::ValueInfoProto& info, const std::string& what) {
  const auto& type = info.type();
  if (!type.has_tensor_type()) {
    const std::string kind = type.has_sequence_type()   ? "sequence"
                             : type.has_optional_type() ? "optional"
                             : type.has_map_type()      ? "map"
                                                        : "non-tensor";
    return "a " + kind + "-typed " + what + " ('" + info.name() + "')";
  }
  const int32_t elem = type.tensor_type().elem_type();
  if (!piper_dtype(elem)) {
    return "dtype " + onnx_type_name(elem) + " (" + what + " '" + info.name() + "')";
  }
  return "";
}

// The fully known static shape of `name` in an inferred graph, if any.
std::optional<engine::Shape> static_shape(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& initializer : graph.initializer()) {
    if (initializer.name() == name)
      return engine::Shape(initializer.dims().begin(), initializer.dims().end());
  }
  for (const auto* infos : {&graph.input(), &graph.value_info(), &graph.output()}) {
    for (const auto& info : *infos) {
      if (info.name() != name || !info.type().has_tensor_type() ||
          !info.type().tensor_type().has_shape()) {
        continue;
      }
      engine::Shape shape;
      for (const auto& dim : info.type().tensor_type().shape().dim()) {
        if (!dim.has_dim_value()) return std::nullopt;
        shape.push_back(dim.dim_value());
      }
      return shape;
    }
  }
  return std::nullopt;
}

// Runs ONNX shape inference on `model` with the graph inputs fixed to this data set's shapes.
// Shape and Size nodes the runner folds are replaced by their values as initializers once
// their input's shape is known, and inference reruns, so that Reshape(x, Shape(y)) resolves
// as the planner's folding resolves it.
onnx::ModelProto infer_with_folded_shapes(const onnx::ModelProto& model, const DataSet& data) {
  onnx::ModelProto base = model;
  std::map<std::string, const HostTensor*> fed;
  const auto inputs = fed_inputs(model);
  for (size_t i = 0; i < inputs.size() && i < data.inputs.size(); ++i) {
    fed[inputs[i]->name()] = &data.inputs[i];
  }
  for (auto& input : *base.mutable_graph()->mutable_input()) {
    const auto found = fed.find(input.name());
    if (found == fed.end()) continue;
    auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : found->second->shape) shape->add_dim()->set_dim_value(d);
  }
  base.mutable_graph()->clear_value_info();
  std::map<std::string, onnx::TensorProto> folded;
  for (;;) {
    onnx::ModelProto inferred = base;
    auto& graph = *inferred.mutable_graph();
    onnx::GraphProto kept;
    for (const auto& node : graph.node()) {
      if (folded.count(node.output(0))) continue;
      *kept.add_node() = node;
    }
    graph.mutable_node()->Swap(kept.mutable_node());
    for (const auto& [name, value] : folded) *graph.add_initializer() = value;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(false, 0, true));
    bool progress = false;
    for (const auto& node : graph.node()) {
      if (node.op_type() == "Constant" || !folded_on_host(node, model.graph())) continue;
      const auto shape = static_shape(graph, node.input(0));
      if (!shape) continue;
      const HostTensor host = shape_node_value(node, *shape);
      onnx::TensorProto& value = folded[node.output(0)];
      value.set_name(node.output(0));
      value.set_data_type(onnx::TensorProto::INT64);
      for (int64_t d : host.shape) value.add_dims(d);
      value.set_raw_data(host.bytes.data(), host.bytes.size());
      progress = true;
    }
    if (!progress) return inferred;
  }
}

// Records the dtype and shape of every intermediate value of `model` for this data set, or
// a problem when one has no static shape or a dtype Piper lacks.
void infer_intermediates(const onnx::ModelProto& model, DataSet& data, std::string& unsupported) {
  std::set<std::string> graph_outputs;
  for (const auto& output : model.graph().output()) graph_outputs.insert(output.name());
  std::set<std::string> needed;
  for (const auto& node : model.graph().node()) {
    if (folded_on_host(node, model.graph())) continue;
    for (const auto& name : node.output()) {
      if (!name.empty() && !graph_outputs.count(name)) needed.insert(name);
    }
  }
  if (needed.empty()) {
    return;
  }
  onnx::ModelProto inferred;
  try {
    inferred = infer_with_folded_shapes(model, data);
  } catch (const std::exception& error) {
    if (unsupported.empty()) unsupported = std::string("shape inference failed: ") + error.what();
    return;
  }
  const auto& graph = inferred.graph();
  for (const auto& info : graph.value_info()) {
    if (!needed.count(info.name())) continue;
    const std::string problem = type_problem(info, "intermediate value");
    if (!problem.empty()) {
      if (unsupported.empty()) unsupported = problem;
      continue;
    }
    if (const auto shape = static_shape(graph, info.name())) {
      data.intermediates[info.name()] =
          ValueType{*piper_dtype(info.type().tensor_type().elem_type()), *shape};
    }
  }
  for (const auto& name : needed) {
    if (!data.intermediates.count(name) && unsupported.empty()) {
      unsupported = "intermediate value '" + name + "' has no statically inferable shape";
    }
  }
}

}  // namespace

bool folded_on_host(const onnx::NodeProto& node, const onnx::GraphProto& graph) {
  const std::string& op = node.op_type();
  if (op != "Constant" && op != "Shape" && op != "Size") return false;
  for (const auto& output : graph.output()) {
    for (const auto& name : node.output()) {
      if (name == output.name()) return false;
    }
  }
  return true;
}

HostTensor shape_node_value(const onnx::NodeProto& node, const engine::Shape& input) {
  std::vector<int64_t> values;
  HostTensor host{plan::INT64, {}, {}};
  if (node.op_type() == "Size") {
    values = {engine::num_elements(input)};
  } else {
    const auto rank = static_cast<int64_t>(input.size());
    int64_t start = 0;
    int64_t end = rank;
    for (const auto& attr : node.attribute()) {
      if (attr.name() == "start") start = attr.i();
      if (attr.name() == "end") end = attr.i();
    }
    auto clamp = [rank](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
    start = clamp(start);
    end = std::max(clamp(end), start);
    values.assign(input.begin() + start, input.begin() + end);
    host.shape = {static_cast<int64_t>(values.size())};
  }
  host.bytes.resize(values.size() * sizeof(int64_t));
  std::memcpy(host.bytes.data(), values.data(), host.bytes.size());
  return host;
}

std::vector<const onnx::ValueInfoProto*> fed_inputs(const onnx::ModelProto& model) {
  std::set<std::string> initialized;
  for (const auto& initializer : model.graph().initializer())
    initialized.insert(initializer.name());
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& input : model.graph().input()) {
    if (!initialized.count(input.name())) inputs.push_back(&input);
  }
  return inputs;
}

TestCase load_test_case(const std::string& dir) {
  TestCase test;
  test.dir = dir;
  test.name = fs::path(dir).filename().string();
  test.model = read_model((fs::path(dir) / "model.onnx").string());
  const auto& graph = test.model.graph();
  for (const auto& input : graph.input()) {
    if (auto problem = type_problem(input, "graph input"); !problem.empty()) {
      test.unsupported = problem;
      break;
    }
  }
  for (const auto& output : graph.output()) {
    if (!test.unsupported.empty()) break;
    test.unsupported = type_problem(output, "graph output");
  }
  for (const auto& initializer : graph.initializer()) {
    if (test.unsupported.empty() && !piper_dtype(initializer.data_type())) {
      test.unsupported = "dtype " + onnx_type_name(initializer.data_type()) + " (initializer '" +
                         initializer.name() + "')";
    }
  }
  if (!test.unsupported.empty()) {
    return test;  // data files may hold sequences or optionals, not TensorProtos
  }
  std::vector<fs::path> sets;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(entry.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) {
    throw Error(dir + ": no test_data_set_* directory");
  }
  for (const auto& set : sets) {
    DataSet data;
    data.name = set.filename().string();
    read_tensors(set, "input", data.inputs, data.input_names, test.unsupported);
    read_tensors(set, "output", data.outputs, data.output_names, test.unsupported);
    if (test.unsupported.empty()) {
      infer_intermediates(test.model, data, test.unsupported);
    }
    test.data_sets.push_back(std::move(data));
  }
  return test;
}

std::vector<std::string> list_test_cases(const std::string& root) {
  if (!fs::is_directory(root)) {
    throw Error("ONNX node test directory '" + root +
                "' does not exist; install the Debian package libonnx-testdata");
  }
  std::vector<std::string> dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && fs::exists(entry.path() / "model.onnx")) {
      dirs.push_back(entry.path().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace piper::conformance
