#include "planner/import/constant_folding.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "formats/error.h"
#include "planner/import/constant_value.h"
#include "planner/import/shape_completion.h"

namespace piper::planner {
namespace {

using Inputs = std::vector<const ConstantValue*>;

int64_t int_attr(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  for (const auto& attr : node.attribute()) {
    if (attr.name() == name) return attr.i();
  }
  return fallback;
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attr : node.attribute()) {
    if (attr.name() == name) return &attr;
  }
  return nullptr;
}

int64_t normalize_axis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

std::vector<int64_t> as_ints(const ConstantValue& value) {
  return std::vector<int64_t>(value.values.begin(), value.values.end());
}

ConstantValue ints_value(const std::vector<int64_t>& ints) {
  ConstantValue value;
  value.data_type = onnx::TensorProto::INT64;
  value.shape = {static_cast<int64_t>(ints.size())};
  value.values.assign(ints.begin(), ints.end());
  return value;
}

ConstantValue fold_constant(const onnx::NodeProto& node, const Inputs&) {
  ConstantValue value;
  if (const auto* attr = find_attr(node, "value")) {
    if (!from_tensor_proto(attr->t(), value)) throw Error("unsupported Constant dtype");
  } else if (const auto* attr = find_attr(node, "value_int")) {
    value.data_type = onnx::TensorProto::INT64;
    value.values = {static_cast<double>(attr->i())};
  } else if (const auto* attr = find_attr(node, "value_ints")) {
    value = ints_value({attr->ints().begin(), attr->ints().end()});
  } else if (const auto* attr = find_attr(node, "value_float")) {
    value.values = {attr->f()};
  } else if (const auto* attr = find_attr(node, "value_floats")) {
    value.shape = {attr->floats_size()};
    value.values.assign(attr->floats().begin(), attr->floats().end());
  } else {
    throw Error("Constant without a supported value attribute");
  }
  return value;
}

ConstantValue fold_gather(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue& data = *in[0];
  const ConstantValue& indices = *in[1];
  const int64_t axis = normalize_axis(int_attr(node, "axis", 0), data.shape.size());
  const int64_t outer = std::accumulate(data.shape.begin(), data.shape.begin() + axis, int64_t{1},
                                        std::multiplies<>());
  const int64_t inner = std::accumulate(data.shape.begin() + axis + 1, data.shape.end(), int64_t{1},
                                        std::multiplies<>());
  ConstantValue out;
  out.data_type = data.data_type;
  out.shape.assign(data.shape.begin(), data.shape.begin() + axis);
  out.shape.insert(out.shape.end(), indices.shape.begin(), indices.shape.end());
  out.shape.insert(out.shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  for (int64_t o = 0; o < outer; ++o) {
    for (double index : indices.values) {
      int64_t i = static_cast<int64_t>(index);
      if (i < 0) i += data.shape[axis];
      for (int64_t k = 0; k < inner; ++k) {
        out.values.push_back(data.values[(o * data.shape[axis] + i) * inner + k]);
      }
    }
  }
  return out;
}

ConstantValue fold_unsqueeze(const onnx::NodeProto&, const Inputs& in) {
  ConstantValue out = *in[0];
  auto axes = as_ints(*in[1]);
  const size_t rank = out.shape.size() + axes.size();
  for (auto& axis : axes) axis = normalize_axis(axis, rank);
  std::sort(axes.begin(), axes.end());
  for (int64_t axis : axes) out.shape.insert(out.shape.begin() + axis, 1);
  return out;
}

ConstantValue fold_squeeze(const onnx::NodeProto&, const Inputs& in) {
  ConstantValue out = *in[0];
  std::vector<int64_t> axes = in.size() > 1 && in[1] ? as_ints(*in[1]) : std::vector<int64_t>{};
  std::vector<int64_t> shape;
  for (size_t d = 0; d < out.shape.size(); ++d) {
    const bool listed =
        axes.empty() ? out.shape[d] == 1 : std::any_of(axes.begin(), axes.end(), [&](int64_t a) {
          return normalize_axis(a, out.shape.size()) == static_cast<int64_t>(d);
        });
    if (!listed) shape.push_back(out.shape[d]);
  }
  out.shape = shape;
  return out;
}

ConstantValue fold_concat(const onnx::NodeProto& node, const Inputs& in) {
  const int64_t axis = normalize_axis(int_attr(node, "axis", 0), in[0]->shape.size());
  ConstantValue out;
  out.data_type = in[0]->data_type;
  out.shape = in[0]->shape;
  out.shape[axis] = 0;
  for (const auto* part : in) out.shape[axis] += part->shape[axis];
  const int64_t outer =
      std::accumulate(out.shape.begin(), out.shape.begin() + axis, int64_t{1}, std::multiplies<>());
  for (int64_t o = 0; o < outer; ++o) {
    for (const auto* part : in) {
      const int64_t chunk = part->size() / std::max<int64_t>(outer, 1);
      out.values.insert(out.values.end(), part->values.begin() + o * chunk,
                        part->values.begin() + (o + 1) * chunk);
    }
  }
  return out;
}

ConstantValue fold_reshape(const onnx::NodeProto&, const Inputs& in) {
  ConstantValue out = *in[0];
  auto shape = as_ints(*in[1]);
  int64_t known = 1;
  int infer_at = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) shape[d] = in[0]->shape.at(d);
    if (shape[d] == -1) {
      infer_at = static_cast<int>(d);
    } else {
      known *= shape[d];
    }
  }
  if (infer_at >= 0) shape[infer_at] = out.size() / known;
  out.shape = shape;
  return out;
}

ConstantValue fold_cast(const onnx::NodeProto& node, const Inputs& in) {
  ConstantValue out = *in[0];
  out.data_type = static_cast<int32_t>(int_attr(node, "to", onnx::TensorProto::FLOAT));
  if (out.is_integer()) {
    for (double& v : out.values) v = std::trunc(v);
  }
  return out;
}

ConstantValue fold_constant_of_shape(const onnx::NodeProto& node, const Inputs& in) {
  ConstantValue fill;
  fill.values = {0.0};
  if (const auto* attr = find_attr(node, "value")) from_tensor_proto(attr->t(), fill);
  ConstantValue out;
  out.data_type = fill.data_type;
  out.shape = as_ints(*in[0]);
  out.values.assign(out.size(), fill.values.at(0));
  return out;
}

ConstantValue fold_range(const onnx::NodeProto&, const Inputs& in) {
  ConstantValue out;
  out.data_type = in[0]->data_type;
  const double start = in[0]->values.at(0), limit = in[1]->values.at(0),
               delta = in[2]->values.at(0);
  const auto n = std::max<int64_t>(static_cast<int64_t>(std::ceil((limit - start) / delta)), 0);
  out.shape = {n};
  for (int64_t i = 0; i < n; ++i) out.values.push_back(start + i * delta);
  return out;
}

ConstantValue fold_slice(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue& data = *in[0];
  const auto starts = as_ints(*in[1]);
  const auto ends = as_ints(*in[2]);
  std::vector<int64_t> axes(starts.size());
  std::iota(axes.begin(), axes.end(), 0);
  if (in.size() > 3 && in[3]) axes = as_ints(*in[3]);
  std::vector<int64_t> steps(starts.size(), 1);
  if (in.size() > 4 && in[4]) steps = as_ints(*in[4]);
  const size_t rank = data.shape.size();
  std::vector<int64_t> begin(rank, 0), step(rank, 1), count(data.shape);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t axis = normalize_axis(axes[k], rank);
    const int64_t dim = data.shape[axis];
    auto clamp = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0) v += dim;
      return std::clamp(v, lo, hi);
    };
    step[axis] = steps[k];
    if (steps[k] > 0) {
      begin[axis] = clamp(starts[k], 0, dim);
      const int64_t end = clamp(ends[k], 0, dim);
      count[axis] = std::max<int64_t>(0, (end - begin[axis] + steps[k] - 1) / steps[k]);
    } else {
      begin[axis] = clamp(starts[k], 0, dim - 1);
      const int64_t end = clamp(ends[k], -1, dim - 1);
      count[axis] = std::max<int64_t>(0, (begin[axis] - end - steps[k] - 1) / -steps[k]);
    }
  }
  ConstantValue out;
  out.data_type = data.data_type;
  out.shape = count;
  const int64_t n = out.size();
  std::vector<int64_t> index(rank, 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t source = 0;
    for (size_t d = 0; d < rank; ++d)
      source = source * data.shape[d] + begin[d] + index[d] * step[d];
    out.values.push_back(data.values[source]);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < count[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

ConstantValue fold_where(const onnx::NodeProto&, const Inputs& in) {
  // Where(c, x, y) = c*x + (1-c)*y with exact selection, via two broadcasts.
  ConstantValue picked = broadcast_binary(*in[0], *in[1], in[1]->data_type,
                                          [](double c, double x) { return c != 0 ? x : NAN; });
  return broadcast_binary(picked, *in[2], in[1]->data_type,
                          [](double p, double y) { return std::isnan(p) ? y : p; });
}

ConstantValue fold_arithmetic(const onnx::NodeProto& node, const Inputs& in) {
  static const std::map<std::string, double (*)(double, double)> kFunctions = {
      {"Add", [](double a, double b) { return a + b; }},
      {"Sub", [](double a, double b) { return a - b; }},
      {"Mul", [](double a, double b) { return a * b; }},
      {"Div", [](double a, double b) { return a / b; }},
      {"Equal", [](double a, double b) { return a == b ? 1.0 : 0.0; }},
      {"Less", [](double a, double b) { return a < b ? 1.0 : 0.0; }},
      {"Greater", [](double a, double b) { return a > b ? 1.0 : 0.0; }},
  };
  const bool comparison =
      node.op_type() == "Equal" || node.op_type() == "Less" || node.op_type() == "Greater";
  ConstantValue out =
      broadcast_binary(*in[0], *in[1], comparison ? onnx::TensorProto::BOOL : in[0]->data_type,
                       kFunctions.at(node.op_type()));
  if (node.op_type() == "Div" && out.is_integer()) {
    for (double& v : out.values) v = std::trunc(v);
  }
  return out;
}

ConstantValue fold_identity(const onnx::NodeProto&, const Inputs& in) { return *in[0]; }

ConstantValue fold_neg(const onnx::NodeProto&, const Inputs& in) {
  ConstantValue out = *in[0];
  for (double& v : out.values) v = -v;
  return out;
}

using FoldFn = ConstantValue (*)(const onnx::NodeProto&, const Inputs&);

const std::map<std::string, FoldFn>& fold_table() {
  static const std::map<std::string, FoldFn> kTable = {
      {"Constant", fold_constant},   {"Gather", fold_gather},
      {"Unsqueeze", fold_unsqueeze}, {"Squeeze", fold_squeeze},
      {"Concat", fold_concat},       {"Reshape", fold_reshape},
      {"Cast", fold_cast},           {"ConstantOfShape", fold_constant_of_shape},
      {"Range", fold_range},         {"Slice", fold_slice},
      {"Where", fold_where},         {"Add", fold_arithmetic},
      {"Sub", fold_arithmetic},      {"Mul", fold_arithmetic},
      {"Div", fold_arithmetic},      {"Equal", fold_arithmetic},
      {"Less", fold_arithmetic},     {"Greater", fold_arithmetic},
      {"Identity", fold_identity},   {"Neg", fold_neg},
  };
  return kTable;
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
  int64_t start = int_attr(node, "start", 0), end = int_attr(node, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  return ints_value({found->second.begin() + start, found->second.begin() + end});
}

bool is_graph_output(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& output : graph.output()) {
    if (output.name() == name) return true;
  }
  return false;
}

// One sweep over the nodes in order; returns how many were folded.
int fold_once(onnx::ModelProto& model, const IsConstantInitializer& is_constant,
              std::set<std::string>& folded) {
  onnx::GraphProto& graph = *model.mutable_graph();
  std::map<std::string, ConstantValue> known;
  for (const auto& init : graph.initializer()) {
    ConstantValue value;
    if ((folded.count(init.name()) || is_constant(init)) && from_tensor_proto(init, value)) {
      known[init.name()] = std::move(value);
    }
  }
  const auto shapes = static_shapes(graph);
  onnx::GraphProto kept_nodes;
  int count = 0;
  for (const auto& node : graph.node()) {
    std::optional<std::vector<ConstantValue>> outputs;
    const bool to_graph_output =
        std::any_of(node.output().begin(), node.output().end(),
                    [&](const auto& o) { return is_graph_output(graph, o); });
    if (node.domain().empty() && !to_graph_output && node.output_size() == 1) {
      if (node.op_type() == "Shape") {
        if (auto value = fold_shape(node, shapes)) outputs = std::vector{*value};
      } else if (const auto fn = fold_table().find(node.op_type()); fn != fold_table().end()) {
        Inputs inputs;
        bool all_known = true;
        for (const auto& name : node.input()) {
          const auto value = known.find(name);
          if (name.empty()) {
            inputs.push_back(nullptr);
          } else if (value == known.end()) {
            all_known = false;
          } else {
            inputs.push_back(&value->second);
          }
        }
        if (all_known) outputs = std::vector{fn->second(node, inputs)};
      }
    }
    if (!outputs) {
      *kept_nodes.add_node() = node;
      continue;
    }
    known[node.output(0)] = (*outputs)[0];
    *graph.add_initializer() = to_tensor_proto((*outputs)[0], node.output(0));
    folded.insert(node.output(0));
    ++count;
  }
  graph.mutable_node()->Swap(kept_nodes.mutable_node());
  return count;
}

}  // namespace

void infer_shapes(onnx::ModelProto& model) {
  model.mutable_graph()->clear_value_info();
  // ONNX infers what it can; Piper completes the shapes it leaves open (Einsum, OneHot) and
  // lets ONNX propagate them downstream, until nothing changes (each round completes at
  // least one more node, so there are at most as many rounds as nodes).
  int rounds = model.graph().node_size() + 1;
  do {
    try {
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                         onnx::ShapeInferenceOptions(false, 1, false));
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
    if (count == 0) return total;
    total += count;
  }
}

}  // namespace piper::planner
