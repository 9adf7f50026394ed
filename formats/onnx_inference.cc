#include "formats/onnx_inference.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <map>
#include <vector>

#include "formats/error.h"

namespace piper::formats {
namespace {

// Who produces and who consumes each value of a graph, by node index.
struct Flow {
  explicit Flow(const onnx::GraphProto& graph) {
    for (int n = 0; n < graph.node_size(); ++n) {
      for (const std::string& input : graph.node(n).input()) {
        if (!input.empty()) consumers[input].push_back(n);
      }
      for (const std::string& value : graph.node(n).output()) {
        if (!value.empty()) producer[value] = n;
      }
    }
  }
  std::map<std::string, int> producer;
  std::map<std::string, std::vector<int>> consumers;
};

bool is_scalar_float(const onnx::ValueInfoProto& info) {
  const auto& type = info.type().tensor_type();
  if (type.elem_type() != onnx::TensorProto::FLOAT) return false;
  for (const auto& dim : type.shape().dim()) {
    if (!dim.has_dim_value() || dim.dim_value() != 1) return false;
  }
  return true;
}

bool reads_weight(const onnx::NodeProto& node, const std::set<std::string>& weights) {
  for (const std::string& input : node.input()) {
    if (weights.count(input)) return true;
  }
  return false;
}

// The graph's inputs that are not initializers (as older exporters list those too).
std::set<std::string> data_inputs(const onnx::GraphProto& graph) {
  std::set<std::string> inputs;
  for (const auto& input : graph.input()) inputs.insert(input.name());
  for (const auto& initializer : graph.initializer()) inputs.erase(initializer.name());
  return inputs;
}

// Shape and Size read only their input's extents, not its values.
bool reads_values(const onnx::NodeProto& node) {
  return node.op_type() != "Shape" && node.op_type() != "Size";
}

// The values that depend on the values of `from` (and `from`), through any chain of nodes.
std::set<std::string> dependent_on(const onnx::GraphProto& graph, std::set<std::string> from) {
  for (const onnx::NodeProto& node : graph.node()) {
    if (!reads_values(node)) continue;
    for (const std::string& input : node.input()) {
      if (!from.count(input)) continue;
      from.insert(node.output().begin(), node.output().end());
      break;
    }
  }
  return from;
}

// The weights: parameters and what is computed from them alone (a transposed tied embedding).
std::set<std::string> weight_values(const onnx::GraphProto& graph,
                                    const std::set<std::string>& parameters) {
  const std::set<std::string> fed = dependent_on(graph, data_inputs(graph));
  std::set<std::string> weights;
  for (const std::string& value : dependent_on(graph, parameters)) {
    if (!fed.count(value)) weights.insert(value);
  }
  return weights;
}

// The nodes `from` reaches (ONNX nodes are in topological order).
std::set<int> reached_from(const std::string& from, const onnx::GraphProto& graph) {
  std::set<std::string> values{from};
  std::set<int> nodes;
  for (int n = 0; n < graph.node_size(); ++n) {
    for (const std::string& input : graph.node(n).input()) {
      if (!values.count(input)) continue;
      nodes.insert(n);
      for (const std::string& output : graph.node(n).output()) values.insert(output);
      break;
    }
  }
  return nodes;
}

// The loss subgraph: what the labels reach, and the weight-free nodes that feed only it.
std::set<int> loss_subgraph(const onnx::GraphProto& graph, const std::set<std::string>& weights,
                            const Flow& flow, int loss_node, const std::string& where) {
  std::set<int> loss;
  for (const std::string& input : data_inputs(graph)) {
    const std::set<int> reached = reached_from(input, graph);
    if (!reached.count(loss_node)) continue;
    bool label = true;
    for (int n : reached) label = label && !reads_weight(graph.node(n), weights);
    if (label) loss.insert(reached.begin(), reached.end());
  }
  if (loss.empty()) {
    throw Error(where +
                ": no model input feeds only the loss (its labels), so the loss's inputs "
                "cannot be told apart; pass --output NAME, the value to export");
  }
  std::set<std::string> outputs;
  for (const auto& output : graph.output()) outputs.insert(output.name());
  for (bool grew = true; grew;) {
    grew = false;
    for (int n = graph.node_size(); n-- > 0;) {
      const onnx::NodeProto& node = graph.node(n);
      if (loss.count(n) || reads_weight(node, weights)) continue;
      bool feeds_only_loss = false, feeds_other = false;
      for (const std::string& value : node.output()) {
        if (outputs.count(value)) feeds_other = true;
        const auto found = flow.consumers.find(value);
        if (found == flow.consumers.end()) continue;
        for (int consumer : found->second) {
          (loss.count(consumer) ? feeds_only_loss : feeds_other) = true;
        }
      }
      if (feeds_only_loss && !feeds_other) grew = loss.insert(n).second;
    }
  }
  return loss;
}

std::string found_cut(const onnx::GraphProto& graph, const std::set<std::string>& parameters,
                      const std::string& where) {
  const Flow flow(graph);
  int loss_node = -1;
  std::string loss_name;
  for (const auto& output : graph.output()) {
    const auto producer = flow.producer.find(output.name());
    if (is_scalar_float(output) && producer != flow.producer.end()) {
      loss_node = producer->second;
      loss_name = output.name();
      break;
    }
  }
  if (loss_node < 0) throw Error(where + ": the model has no scalar float output (its loss)");
  const std::string loss_where = where + ", loss '" + loss_name + "'";
  const std::set<int> loss =
      loss_subgraph(graph, weight_values(graph, parameters), flow, loss_node, loss_where);
  const std::set<std::string> dependent = dependent_on(graph, parameters);
  std::map<std::string, std::string> cut;  // value -> the loss node taking it
  for (int n : loss) {
    for (const std::string& input : graph.node(n).input()) {
      const auto producer = flow.producer.find(input);
      const bool inside = producer != flow.producer.end() && loss.count(producer->second);
      if (!inside && dependent.count(input)) cut.emplace(input, graph.node(n).name());
    }
  }
  if (cut.size() != 1) {
    std::string named;
    for (const auto& [value, node] : cut) {
      named += (named.empty() ? "'" : ", '") + value + "' (into node '" + node + "')";
    }
    throw Error(loss_where + ": the loss subgraph takes " + std::to_string(cut.size()) +
                " values that depend on parameters" + (named.empty() ? "" : ": " + named) +
                "; pass --output NAME, the one to export");
  }
  return cut.begin()->first;
}

const onnx::ValueInfoProto* described(const onnx::GraphProto& graph, const std::string& value) {
  for (const auto* infos : {&graph.input(), &graph.value_info(), &graph.output()}) {
    for (const auto& info : *infos) {
      if (info.name() == value && info.has_type()) return &info;
    }
  }
  return nullptr;
}

// The cut model's output typed from shape inference where the model did not describe it.
void describe_output(onnx::ModelProto& cut) {
  onnx::ValueInfoProto& output = *cut.mutable_graph()->mutable_output(0);
  if (output.has_type()) return;
  onnx::ModelProto inferred = cut;
  try {
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance());
  } catch (const std::exception&) {
    return;  // an untyped output is still valid ONNX
  }
  if (const auto* info = described(inferred.graph(), output.name())) {
    *output.mutable_type() = info->type();
  }
}

// `model` with only what `output` needs, `output` renamed `name`.
onnx::ModelProto pruned(const onnx::ModelProto& model, const std::string& output,
                        const std::string& name) {
  const onnx::GraphProto& graph = model.graph();
  const Flow flow(graph);
  std::set<std::string> needed{output};
  std::vector<bool> kept(static_cast<size_t>(graph.node_size()), false);
  for (int n = graph.node_size(); n-- > 0;) {
    for (const std::string& value : graph.node(n).output()) {
      if (!needed.count(value)) continue;
      kept[static_cast<size_t>(n)] = true;
      needed.insert(graph.node(n).input().begin(), graph.node(n).input().end());
      break;
    }
  }
  onnx::ValueInfoProto info;
  if (const auto* described_output = described(graph, output)) info = *described_output;
  info.set_name(name);
  onnx::ModelProto cut = model;
  onnx::GraphProto& out = *cut.mutable_graph();
  out.clear_node();
  out.clear_input();
  out.clear_initializer();
  out.clear_value_info();
  out.clear_output();
  for (int n = 0; n < graph.node_size(); ++n) {
    if (!kept[static_cast<size_t>(n)]) continue;
    onnx::NodeProto& node = *out.add_node() = graph.node(n);
    for (auto& value : *node.mutable_output()) {
      if (value == output) value = name;
    }
  }
  for (const auto& input : graph.input()) {
    if (needed.count(input.name())) *out.add_input() = input;
  }
  for (const auto& initializer : graph.initializer()) {
    if (needed.count(initializer.name())) *out.add_initializer() = initializer;
  }
  for (const auto& value : graph.value_info()) {
    if (needed.count(value.name()) && value.name() != output) *out.add_value_info() = value;
  }
  *out.add_output() = info;
  describe_output(cut);
  return cut;
}

bool has_value(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& input : graph.input()) {
    if (input.name() == name) return true;
  }
  for (const auto& node : graph.node()) {
    for (const std::string& output : node.output()) {
      if (output == name) return true;
    }
  }
  return false;
}

}  // namespace

onnx::ModelProto inference_model(const onnx::ModelProto& model,
                                 const std::set<std::string>& parameters, const std::string& output,
                                 const std::string& model_name) {
  const onnx::GraphProto& graph = model.graph();
  if (!output.empty()) {
    if (!has_value(graph, output)) {
      throw Error("--output '" + output + "': " + model_name +
                  " has no value of that name (a model input or a node's output)");
    }
    return pruned(model, output, output);
  }
  const std::string cut = found_cut(graph, parameters, model_name);
  return pruned(model, cut, has_value(graph, "logits") ? cut : "logits");
}

}  // namespace piper::formats
