#include "planner/import/shape_completion.h"

#include <cmath>
#include <map>
#include <optional>

#include "formats/einsum.h"
#include "formats/error.h"
#include "planner/import/constant_value.h"

namespace piper::planner {
namespace {

struct Known {
  int32_t elem_type = 0;
  std::vector<int64_t> shape;
};

// Type and shape of every value whose dimensions are all known.
std::map<std::string, Known> known_values(const onnx::GraphProto& graph) {
  std::map<std::string, Known> known;
  auto add = [&](const onnx::ValueInfoProto& info) {
    if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) return;
    Known value{info.type().tensor_type().elem_type(), {}};
    for (const auto& dim : info.type().tensor_type().shape().dim()) {
      if (!dim.has_dim_value()) return;
      value.shape.push_back(dim.dim_value());
    }
    known[info.name()] = value;
  };
  for (const auto& info : graph.input()) add(info);
  for (const auto& info : graph.value_info()) add(info);
  for (const auto& info : graph.output()) add(info);
  for (const auto& init : graph.initializer()) {
    known[init.name()] = {init.data_type(), {init.dims().begin(), init.dims().end()}};
  }
  return known;
}

int64_t int_attr(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  for (const auto& attr : node.attribute()) {
    if (attr.name() == name) return attr.i();
  }
  return fallback;
}

std::optional<std::vector<int64_t>> einsum_shape(const onnx::NodeProto& node,
                                                 const std::map<std::string, Known>& known) {
  std::string equation;
  for (const auto& attr : node.attribute()) {
    if (attr.name() == "equation") equation = attr.s();
  }
  std::vector<size_t> ranks;
  std::vector<const std::vector<int64_t>*> shapes;
  for (const auto& input : node.input()) {
    const auto found = known.find(input);
    if (found == known.end()) return std::nullopt;
    ranks.push_back(found->second.shape.size());
    shapes.push_back(&found->second.shape);
  }
  formats::EinsumEquation parsed;
  try {
    parsed = formats::parse_einsum(equation, ranks);
  } catch (const Error& error) {
    throw Error("node '" + node.name() + "' (Einsum): " + error.what());
  }
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t d = 0; d < shapes[i]->size(); ++d) {
      int64_t& size = sizes[parsed.inputs[i][d]];
      size = std::max(size, (*shapes[i])[d]);
    }
  }
  std::vector<int64_t> shape;
  for (int label : parsed.output) shape.push_back(sizes.at(label));
  return shape;
}

std::optional<std::vector<int64_t>> one_hot_shape(const onnx::NodeProto& node,
                                                  const onnx::GraphProto& graph,
                                                  const std::map<std::string, Known>& known) {
  if (node.input_size() < 3) return std::nullopt;
  const auto indices = known.find(node.input(0));
  if (indices == known.end()) return std::nullopt;
  for (const auto& init : graph.initializer()) {
    if (init.name() != node.input(1)) continue;
    ConstantValue depth;
    if (!from_tensor_proto(init, depth) || depth.stored() != 1) return std::nullopt;
    // ONNX lets depth be of any numeric type; a real one counts its whole part.
    if (!depth.is_integer() && !(std::abs(depth.reals[0]) < 1e18)) return std::nullopt;
    const int64_t count = depth.is_integer() ? depth.ints[0] : static_cast<int64_t>(depth.reals[0]);
    std::vector<int64_t> shape = indices->second.shape;
    const auto rank = static_cast<int64_t>(shape.size()) + 1;
    int64_t axis = int_attr(node, "axis", -1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return std::nullopt;
    shape.insert(shape.begin() + axis, count);
    return shape;
  }
  return std::nullopt;
}

void set_value_info(onnx::GraphProto& graph, const std::string& name, int32_t elem_type,
                    const std::vector<int64_t>& shape) {
  onnx::ValueInfoProto* info = nullptr;
  for (auto& existing : *graph.mutable_value_info()) {
    if (existing.name() == name) info = &existing;
  }
  if (info == nullptr) {
    info = graph.add_value_info();
    info->set_name(name);
  }
  auto* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  tensor->clear_shape();
  auto* dims = tensor->mutable_shape();
  for (int64_t dim : shape) dims->add_dim()->set_dim_value(dim);
}

}  // namespace

int complete_shapes(onnx::ModelProto& model) {
  onnx::GraphProto& graph = *model.mutable_graph();
  const std::map<std::string, Known> known = known_values(graph);
  int completed = 0;
  for (const auto& node : graph.node()) {
    if (node.output_size() < 1 || known.count(node.output(0))) continue;
    std::optional<std::vector<int64_t>> shape;
    int32_t elem_type = 0;
    if (node.op_type() == "Einsum" && node.input_size() > 0) {
      shape = einsum_shape(node, known);
      if (shape) elem_type = known.at(node.input(0)).elem_type;
    } else if (node.op_type() == "OneHot") {
      shape = one_hot_shape(node, graph, known);
      const auto values = known.find(node.input_size() > 2 ? node.input(2) : "");
      if (values == known.end()) shape.reset();
      if (shape) elem_type = values->second.elem_type;
    }
    if (!shape) continue;
    set_value_info(graph, node.output(0), elem_type, *shape);
    ++completed;
  }
  return completed;
}

}  // namespace piper::planner
