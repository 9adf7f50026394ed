#include "planner/import/constant_folding.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <map>

#include "formats/error.h"
#include "planner/import/fold_rules.h"
#include "planner/import/shape_completion.h"

namespace piper::planner {
namespace {

std::string node_label(const onnx::NodeProto& node, int index) {
  const std::string name =
      node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
  return "node '" + name + "' (" + node.op_type() + ")";
}

const fold::Rules& fold_rules() {
  static const fold::Rules kRules = [] {
    fold::Rules rules;
    fold::add_source_rules(rules);
    fold::add_layout_rules(rules);
    fold::add_elementwise_rules(rules);
    return rules;
  }();
  return kRules;
}

// Static shapes of every value that shape inference (or the graph) knows fully.
std::map<std::string, std::vector<int64_t>> static_shapes(const onnx::GraphProto& graph) {
  std::map<std::string, std::vector<int64_t>> shapes;
  auto add = [&](const onnx::ValueInfoProto& info) {
    if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) return;
    std::vector<int64_t> shape;
    for (const auto& dim : info.type().tensor_type().shape().dim()) {
      if (!dim.has_dim_value()) return;
      shape.push_back(dim.dim_value());
    }
    shapes[info.name()] = shape;
  };
  for (const auto& info : graph.input()) add(info);
  for (const auto& info : graph.value_info()) add(info);
  for (const auto& info : graph.output()) add(info);
  for (const auto& init : graph.initializer()) {
    shapes[init.name()] = std::vector<int64_t>(init.dims().begin(), init.dims().end());
  }
  return shapes;
}

std::optional<ConstantValue> fold_shape(const onnx::NodeProto& node,
                                        const std::map<std::string, std::vector<int64_t>>& shapes) {
  const auto found = shapes.find(node.input(0));
  if (found == shapes.end()) return std::nullopt;
  const auto rank = static_cast<int64_t>(found->second.size());
  int64_t start = fold::int_attr(node, "start", 0), end = fold::int_attr(node, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  return int_vector({found->second.begin() + start, found->second.begin() + end});
}

bool is_graph_output(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& output : graph.output()) {
    if (output.name() == name) return true;
  }
  return false;
}

// The values of `node`'s inputs (null for an omitted optional one), or nullopt when one is not
// known.
std::optional<fold::Inputs> known_inputs(const onnx::NodeProto& node,
                                         const std::map<std::string, ConstantValue>& known) {
  fold::Inputs inputs;
  for (const auto& name : node.input()) {
    if (name.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    const auto value = known.find(name);
    if (value == known.end()) return std::nullopt;
    inputs.push_back(&value->second);
  }
  return inputs;
}

// The values of all of `node`'s outputs, or none when the folder leaves it to the engine:
// one-output ops by their rule (fold_node), Split by fold::fold_split.
std::vector<ConstantValue> fold_outputs(const onnx::NodeProto& node, const fold::Inputs& inputs,
                                        int index) {
  if (node.op_type() == "Split") {
    try {
      return fold::fold_split(node, inputs);
    } catch (const Error& error) {
      throw Error(node_label(node, index) + ": " + error.what());
    }
  }
  if (node.output_size() != 1) return {};
  std::optional<ConstantValue> output = fold_node(node, inputs, index);
  if (!output) return {};
  std::vector<ConstantValue> outputs;
  outputs.push_back(std::move(*output));
  return outputs;
}

// One sweep over the nodes in order; returns how many were folded.
int fold_once(onnx::ModelProto& model, const IsConstantInitializer& is_constant,
              std::set<std::string>& folded) {
  onnx::GraphProto& graph = *model.mutable_graph();
  std::map<std::string, ConstantValue> known;
  for (const auto& init : graph.initializer()) {
    if (!folded.count(init.name()) && !is_constant(init)) continue;
    ConstantValue value;
    try {
      if (from_tensor_proto(init, value)) known[init.name()] = std::move(value);
    } catch (const Error& error) {
      throw Error("initializer '" + init.name() + "': " + error.what());
    }
  }
  const auto shapes = static_shapes(graph);
  onnx::GraphProto kept_nodes;
  int count = 0;
  for (int index = 0; index < graph.node_size(); ++index) {
    const onnx::NodeProto& node = graph.node(index);
    std::vector<ConstantValue> outputs;
    const bool to_graph_output =
        std::any_of(node.output().begin(), node.output().end(),
                    [&](const auto& o) { return is_graph_output(graph, o); });
    if (node.domain().empty() && !to_graph_output) {
      if (node.op_type() == "Shape" && node.output_size() == 1) {
        if (auto output = fold_shape(node, shapes)) outputs.push_back(std::move(*output));
      } else if (const auto inputs = known_inputs(node, known)) {
        outputs = fold_outputs(node, *inputs, index);
      }
    }
    if (outputs.empty()) {
      *kept_nodes.add_node() = node;
      continue;
    }
    for (int i = 0; i < node.output_size(); ++i) {
      *graph.add_initializer() = to_tensor_proto(outputs[i], node.output(i));
      known[node.output(i)] = std::move(outputs[i]);
      folded.insert(node.output(i));
    }
    ++count;
  }
  graph.mutable_node()->Swap(kept_nodes.mutable_node());
  return count;
}

}  // namespace

std::optional<ConstantValue> fold_node(const onnx::NodeProto& node,
                                       const std::vector<const ConstantValue*>& inputs, int index) {
  const auto rule = fold_rules().find(node.op_type());
  if (rule == fold_rules().end()) return std::nullopt;
  try {
    return rule->second(node, inputs);
  } catch (const Error& error) {
    throw Error(node_label(node, index) + ": " + error.what());
  }
}

void infer_shapes(onnx::ModelProto& model, bool propagate_data) {
  model.mutable_graph()->clear_value_info();
  // ONNX infers what it can; Piper completes the shapes it leaves open (Einsum, OneHot) and
  // lets ONNX propagate them downstream, until nothing changes (each round completes at
  // least one more node, so there are at most as many rounds as nodes).
  int rounds = model.graph().node_size() + 1;
  do {
    try {
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                         onnx::ShapeInferenceOptions(false, 1, propagate_data));
    } catch (const std::exception& error) {
      throw Error(std::string("ONNX shape inference failed: ") + error.what());
    }
  } while (complete_shapes(model) > 0 && --rounds > 0);
}

int fold_constants(onnx::ModelProto& model, const IsConstantInitializer& is_constant,
                   std::set<std::string>& folded) {
  int total = 0;
  for (;;) {
    infer_shapes(model);
    const int count = fold_once(model, is_constant, folded);
    if (count == 0) break;
    total += count;
  }
  // What stays unfolded around a NonZero are Shape chains of tensors with run-time extents;
  // data propagation carries their values into the shapes of the Reshapes they feed. Only
  // then: ONNX 1.12's propagation reports malformed shapes worse than the folder (and crashes
  // on some), which has checked every folded node by now.
  const auto& nodes = model.graph().node();
  if (std::any_of(nodes.begin(), nodes.end(),
                  [](const onnx::NodeProto& node) { return node.op_type() == "NonZero"; })) {
    infer_shapes(model, true);
  }
  return total;
}

}  // namespace piper::planner
