#include "planner/import/import.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "formats/error.h"
#include "formats/onnx_model.h"
#include "planner/fusion/fusion.h"
#include "planner/import/constant_folding.h"
#include "planner/import/constant_value.h"
#include "planner/import/widen_int32.h"
#include "planner/ir/dynamic_dims.h"

namespace piper::planner {
namespace {

std::optional<ir::DType> to_dtype(int32_t onnx_type) {
  switch (onnx_type) {
    case onnx::TensorProto::FLOAT:
      return ir::DType::kFloat32;
    case onnx::TensorProto::INT64:
      return ir::DType::kInt64;
    case onnx::TensorProto::BOOL:
      return ir::DType::kBool;
    case onnx::TensorProto::BFLOAT16:
      return ir::DType::kBFloat16;
    default:
      return std::nullopt;
  }
}

std::set<std::string> initializer_names(const onnx::GraphProto& graph) {
  std::set<std::string> names;
  for (const auto& init : graph.initializer()) names.insert(init.name());
  return names;
}

// Fixes the leading dimension of every graph input to the planned batch.
void specialize_batch(onnx::GraphProto& graph, int64_t batch, const std::string& model_name) {
  const auto initializers = initializer_names(graph);
  for (auto& input : *graph.mutable_input()) {
    if (initializers.count(input.name())) continue;
    auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() == 0) continue;
    auto* dim = shape->mutable_dim(0);
    if (dim->has_dim_value() && dim->dim_value() != batch) {
      throw Error(model_name + ": input '" + input.name() + "' has its batch dimension fixed at " +
                  std::to_string(dim->dim_value()) + " but the strategy plans batches of " +
                  std::to_string(batch) +
                  "; re-export with torch.onnx.export(..., dynamic_axes={'" + input.name() +
                  "': {0: 'batch'}}) so the batch can be re-planned");
    }
    dim->clear_dim_param();
    dim->set_dim_value(batch);
  }
  for (auto& output : *graph.mutable_output()) {
    output.mutable_type()->mutable_tensor_type()->clear_shape();
  }
}

ir::Attributes convert_attributes(const onnx::NodeProto& node, const std::string& where) {
  ir::Attributes attributes;
  for (const auto& attr : node.attribute()) {
    switch (attr.type()) {
      case onnx::AttributeProto::INT:
        attributes[attr.name()] = static_cast<int64_t>(attr.i());
        break;
      case onnx::AttributeProto::FLOAT:
        attributes[attr.name()] = static_cast<double>(attr.f());
        break;
      case onnx::AttributeProto::STRING:
        attributes[attr.name()] = attr.s();
        break;
      case onnx::AttributeProto::INTS:
        attributes[attr.name()] = std::vector<int64_t>(attr.ints().begin(), attr.ints().end());
        break;
      case onnx::AttributeProto::FLOATS:
        attributes[attr.name()] = std::vector<double>(attr.floats().begin(), attr.floats().end());
        break;
      case onnx::AttributeProto::TENSOR: {
        // A one-element tensor (ConstantOfShape's value) becomes a scalar attribute: an int
        // for integer and bool tensors, a float otherwise; the op's output carries the dtype.
        ConstantValue value;
        if (from_tensor_proto(attr.t(), value) && value.stored() == 1) {
          if (value.is_integer()) {
            attributes[attr.name()] = value.ints[0];
          } else {
            attributes[attr.name()] = value.reals[0];
          }
          break;
        }
        throw Error(where + ": tensor attribute '" + attr.name() +
                    "' must hold one element of a supported type");
      }
      default:
        throw Error(where + ": attribute '" + attr.name() + "' has a type Piper does not support");
    }
  }
  return attributes;
}

class GraphBuilder {
 public:
  GraphBuilder(const onnx::GraphProto& graph, const std::set<std::string>& folded,
               const ImportOptions& options, std::string model_name)
      : graph_(graph), folded_(folded), options_(options), model_name_(std::move(model_name)) {
    for (const auto& info : graph.input()) infos_[info.name()] = &info;
    for (const auto& info : graph.value_info()) infos_[info.name()] = &info;
    for (const auto& info : graph.output()) infos_[info.name()] = &info;
    for (const auto& init : graph.initializer()) initializers_[init.name()] = &init;
  }

  ir::OpGraph build() {
    for (const auto& input : graph_.input()) {
      if (initializers_.count(input.name())) continue;
      const ir::TensorId id = tensor_for(input.name(), "graph input");
      ir_.tensor(id).role = ir::Role::kInput;
      ir_.inputs.push_back(id);
    }
    for (int index = 0; index < graph_.node_size(); ++index) add_node(graph_.node(index), index);
    find_loss();
    return std::move(ir_);
  }

 private:
  ir::TensorId tensor_for(const std::string& name, const std::string& where) {
    if (name.empty()) return -1;
    if (const auto found = ids_.find(name); found != ids_.end()) return found->second;
    ir::Tensor tensor;
    tensor.name = name;
    if (const auto init = initializers_.find(name); init != initializers_.end()) {
      describe_initializer(*init->second, tensor, where);
    } else {
      describe_value(name, tensor, where);
    }
    const ir::TensorId id = ir_.add_tensor(std::move(tensor));
    ids_[name] = id;
    return id;
  }

  void describe_initializer(const onnx::TensorProto& init, ir::Tensor& tensor,
                            const std::string& where) {
    const auto dtype = to_dtype(init.data_type());
    if (!dtype) {
      throw Error(model_name_ + ": " + where + " uses initializer '" + init.name() +
                  "' of ONNX data type " + std::to_string(init.data_type()) +
                  ", which Piper does not support (float32, int64, bool)");
    }
    tensor.dtype = *dtype;
    tensor.shape.assign(init.dims().begin(), init.dims().end());
    if (folded_.count(init.name())) {
      tensor.role = ir::Role::kConstant;
      tensor.data = formats::initializer_bytes(init);
      if (tensor.dtype == ir::DType::kBool) narrow_bool(tensor.data);
      return;
    }
    tensor.initializer = init.name();
    const bool trained = tensor.dtype == ir::DType::kFloat32 && !options_.is_frozen(init.name());
    tensor.role = trained ? ir::Role::kParameter : ir::Role::kConstant;
    // Integer initializers are axes, shapes and indices that gradient rules
    // read at planning time; the engine still loads them from the model.
    if (tensor.dtype == ir::DType::kInt64) tensor.data = formats::initializer_bytes(init);
  }

  // initializer_bytes already gives one byte per bool (from raw data or int32_data); the
  // plan holds 0 or 1.
  static void narrow_bool(std::vector<uint8_t>& data) {
    for (uint8_t& byte : data) byte = byte != 0;
  }

  void describe_value(const std::string& name, ir::Tensor& tensor, const std::string& where) {
    const auto info = infos_.find(name);
    const auto& type = info == infos_.end() ? onnx::TypeProto() : info->second->type();
    const auto dtype = to_dtype(type.tensor_type().elem_type());
    if (info == infos_.end() || !type.has_tensor_type()) {
      throw Error(model_name_ + ": " + where + ": the type of '" + name +
                  "' is unknown after shape inference");
    }
    if (!dtype) {
      // Name the type: int32 indices and float64 inputs are the usual cases,
      // and both are fixed by exporting with other example inputs.
      throw Error(model_name_ + ": " + where + ": '" + name + "' is " +
                  onnx::TensorProto_DataType_Name(type.tensor_type().elem_type()) +
                  ", which Piper does not support (float32, int64 and bool tensors); export the "
                  "model with those dtypes (for a graph input, example inputs and data of int64 "
                  "or float32 rather than int32 or float64)");
    }
    tensor.dtype = *dtype;
    if (!type.tensor_type().has_shape()) {
      throw Error(model_name_ + ": " + where + ": the shape of '" + name +
                  "' could not be inferred for the planned batch size");
    }
    // A dimension left symbolic with the batch fixed is a run-time extent (NonZero's count and
    // what is computed from it) or an error; ir::infer_dynamic_dims tells which.
    for (const auto& dim : type.tensor_type().shape().dim()) {
      tensor.shape.push_back(dim.has_dim_value() ? dim.dim_value() : ir::kUnknownDim);
    }
    tensor.role = ir::Role::kActivation;
  }

  void add_node(const onnx::NodeProto& node, int index) {
    ir::Op op;
    op.type = node.domain().empty() || node.domain() == "ai.onnx"
                  ? node.op_type()
                  : node.domain() + "." + node.op_type();
    op.name = node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
    const std::string where = "node '" + op.name + "' (" + op.type + ")";
    for (const auto& input : node.input()) op.inputs.push_back(tensor_for(input, where));
    // NonZero also writes how many indices it found (docs/plan-format.md), declared first: the
    // extent of its output's second dimension.
    const ir::TensorId count = op.type == "NonZero" ? count_tensor(node) : -1;
    for (const auto& output : node.output()) op.outputs.push_back(tensor_for(output, where));
    if (count >= 0) op.outputs.push_back(count);
    op.attributes = convert_attributes(node, model_name_ + ": " + where);
    ir_.add_op(std::move(op));
  }

  ir::TensorId count_tensor(const onnx::NodeProto& node) {
    ir::Tensor count;
    count.name = (node.output_size() > 0 ? node.output(0) : node.name()) + "/count";
    count.dtype = ir::DType::kInt64;
    return ir_.add_tensor(std::move(count));
  }

  void find_loss() {
    for (const auto& output : graph_.output()) {
      const auto found = ids_.find(output.name());
      if (found == ids_.end()) continue;
      const ir::Tensor& tensor = ir_.tensor(found->second);
      if (tensor.dtype == ir::DType::kFloat32 && ir::num_elements(tensor.shape) == 1) {
        ir_.loss = found->second;
        ir_.tensor(found->second).role = ir::Role::kLoss;
        return;
      }
    }
    throw Error(model_name_ +
                ": the model has no scalar float output to train on; compute the loss inside "
                "forward() and export it as the first output");
  }

  const onnx::GraphProto& graph_;
  const std::set<std::string>& folded_;
  const ImportOptions& options_;
  std::string model_name_;
  std::map<std::string, const onnx::ValueInfoProto*> infos_;
  std::map<std::string, const onnx::TensorProto*> initializers_;
  std::map<std::string, ir::TensorId> ids_;
  ir::OpGraph ir_;
};

// The ONNX element type of every value the graph describes.
std::map<std::string, int32_t> element_types(const onnx::GraphProto& graph) {
  std::map<std::string, int32_t> types;
  for (const auto* infos : {&graph.input(), &graph.value_info(), &graph.output()}) {
    for (const auto& info : *infos) types[info.name()] = info.type().tensor_type().elem_type();
  }
  for (const auto& init : graph.initializer()) types[init.name()] = init.data_type();
  return types;
}

// PyTorch exports torch.isinf as IsInf(Cast(x, to = DOUBLE)), and Piper holds no doubles.
// Widening a float keeps its class (finite, ±infinity, NaN), so a Cast of a float32 or
// bfloat16 value to double that only IsInf and IsNaN read is dropped and they read x.
void drop_double_casts_into_class_tests(onnx::GraphProto& graph) {
  const std::map<std::string, int32_t> types = element_types(graph);
  std::map<std::string, std::vector<onnx::NodeProto*>> readers;
  for (auto& node : *graph.mutable_node()) {
    for (const auto& input : node.input()) readers[input].push_back(&node);
  }
  for (const auto& output : graph.output()) readers[output.name()].push_back(nullptr);
  const auto is_float = [&types](const std::string& name) {
    const auto found = types.find(name);
    return found != types.end() && (found->second == onnx::TensorProto::FLOAT ||
                                    found->second == onnx::TensorProto::BFLOAT16);
  };
  const auto class_test = [](const onnx::NodeProto* node) {
    return node && (node->op_type() == "IsInf" || node->op_type() == "IsNaN");
  };
  for (int i = graph.node_size() - 1; i >= 0; --i) {
    const onnx::NodeProto& cast = graph.node(i);
    if (cast.op_type() != "Cast" || cast.input_size() != 1 || !is_float(cast.input(0))) continue;
    const auto to = std::find_if(cast.attribute().begin(), cast.attribute().end(),
                                 [](const auto& attr) { return attr.name() == "to"; });
    if (to == cast.attribute().end() || to->i() != onnx::TensorProto::DOUBLE) continue;
    const std::vector<onnx::NodeProto*>& tests = readers[cast.output(0)];
    if (tests.empty() || !std::all_of(tests.begin(), tests.end(), class_test)) continue;
    for (onnx::NodeProto* test : tests) test->set_input(0, cast.input(0));
    graph.mutable_node()->DeleteSubrange(i, 1);
  }
}

// Ops whose first output holds values of their first input, rearranged or a subset of them:
// labels and indices reach their consumer through these (HF's shifted labels are Slice then
// Reshape).
bool keeps_values(const std::string& type) {
  static const std::set<std::string> kTypes = {"Reshape", "Flatten",  "Squeeze", "Unsqueeze",
                                               "Slice",   "Identity", "Expand",  "Transpose"};
  return kTypes.count(type) > 0;
}

// The extent an integer tensor indexes where `op` reads it (labels' classes, a Gather's rows),
// or none.
std::optional<int64_t> indexed_extent(const ir::OpGraph& graph, const ir::Op& op,
                                      ir::TensorId value) {
  if (op.inputs.size() < 2 || op.inputs[1] != value) return std::nullopt;
  if (op.type == "SoftmaxCrossEntropyLoss" || op.type == "NegativeLogLikelihoodLoss") {
    return graph.tensor(op.inputs[0]).shape.at(1);
  }
  if (op.type == "Gather") {
    const int64_t axis = ir::attr_int(op.attributes, "axis", 0);
    const auto& data_shape = graph.tensor(op.inputs[0]).shape;
    return data_shape.at(axis < 0 ? axis + static_cast<int64_t>(data_shape.size()) : axis);
  }
  return std::nullopt;
}

// Integer batch inputs that index something, directly or through ops that keep their values,
// get the range synthetic data draws from.
void set_integer_ranges(ir::OpGraph& graph) {
  for (ir::TensorId input : graph.inputs) {
    std::vector<ir::TensorId> values = {input};
    while (!values.empty()) {
      const ir::TensorId value = values.back();
      values.pop_back();
      for (ir::OpId consumer : graph.consumers(value)) {
        const ir::Op& op = graph.op(consumer);
        if (const auto extent = indexed_extent(graph, op, value)) {
          graph.tensor(input).int_high = *extent;
        } else if (keeps_values(op.type) && op.inputs.at(0) == value && !op.outputs.empty()) {
          values.push_back(op.outputs[0]);
        }
      }
    }
  }
}

// Reshape and Expand read their target shape from a tensor, which for a tensor with a run-time
// extent is computed (Shape, Concat ...) from it each step. The plan states their outputs'
// shapes with the extents, and kernels take the shape from there, so the target becomes a
// constant of the bounds and the ops that computed it are removed.
void drop_run_time_shapes(ir::OpGraph& graph) {
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    ir::Op& op = graph.op(id);
    if ((op.type != "Reshape" && op.type != "Expand") || op.inputs.size() < 2 ||
        graph.producer(op.inputs[1]) < 0) {
      continue;
    }
    const ir::Shape& shape = graph.tensor(op.outputs.at(0)).shape;
    ir::Tensor target;
    target.name = op.name + "/planned_shape";
    target.dtype = ir::DType::kInt64;
    target.shape = {static_cast<int64_t>(shape.size())};
    target.role = ir::Role::kConstant;
    target.data.resize(shape.size() * sizeof(int64_t));
    std::memcpy(target.data.data(), shape.data(), target.data.size());
    const ir::TensorId target_id = graph.add_tensor(std::move(target));
    graph.op(id).inputs[1] = target_id;
  }
  remove_dead_ops(graph);
}

}  // namespace

onnx::ModelProto load_model_for_import(const std::string& model_path,
                                       std::vector<formats::ExternalFile>* files) {
  onnx::ModelProto model = formats::load_onnx_model(model_path);
  const formats::ExternalData external(model, model_path);
  formats::inline_external_data(model, external, [](const onnx::TensorProto& tensor) {
    return tensor.data_type() != onnx::TensorProto::FLOAT;
  });
  if (files) *files = external.files();
  return model;
}

ir::OpGraph import_model(onnx::ModelProto model, const ImportOptions& options,
                         const std::string& model_name) {
  specialize_batch(*model.mutable_graph(), options.batch, model_name);
  std::set<std::string> folded;
  const auto is_constant = [&](const onnx::TensorProto& init) {
    return init.data_type() != onnx::TensorProto::FLOAT || options.is_frozen(init.name());
  };
  try {
    fold_constants(model, is_constant, folded);
    // The widened values' types come from shape inference, which folding runs.
    if (widen_int32(*model.mutable_graph(), folded)) fold_constants(model, is_constant, folded);
  } catch (const Error& error) {
    throw Error(model_name + ": " + error.what());
  }
  drop_double_casts_into_class_tests(*model.mutable_graph());
  ir::OpGraph graph = GraphBuilder(model.graph(), folded, options, model_name).build();
  try {
    ir::infer_dynamic_dims(graph);
  } catch (const Error& error) {
    throw Error(model_name + ": " + error.what());
  }
  if (ir::has_dynamic_dims(graph)) drop_run_time_shapes(graph);
  set_integer_ranges(graph);
  return graph;
}

}  // namespace piper::planner
