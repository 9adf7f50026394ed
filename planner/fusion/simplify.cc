// The simplifications around the fusion rules. Exporters write ops that compute nothing in a
// training step (HuggingFace: Dropout with ratio 0 where dropout is configured off, `.to(dtype)`
// of a tensor already in that dtype, slices to the whole tensor) and scalars computed at run
// time from constants (GPT-2's attention scale, size(-1) ** 0.5), which hide the patterns the
// rules match. Removing them is exact: every op they feed reads the same values.
#include <cmath>
#include <cstring>
#include <functional>

#include "planner/fusion/fusion.h"
#include "planner/fusion/graph_rewrite.h"

namespace piper::planner {
namespace {

std::optional<bool> bool_scalar(const ir::OpGraph& graph, ir::TensorId tensor) {
  if (tensor < 0) return std::nullopt;
  const ir::Tensor& t = graph.tensor(tensor);
  if (t.role != ir::Role::kConstant || t.dtype != ir::DType::kBool || t.data.size() != 1) {
    return std::nullopt;
  }
  return t.data[0] != 0;
}

bool has_readers(const PatternView& view, ir::TensorId tensor) {
  return tensor >= 0 && (!view.consumers(tensor).empty() || tensor == view.graph().loss);
}

// ONNX Dropout is the identity outside training mode (training_mode omitted or false) and,
// in training mode, with ratio 0 (1/(1 - 0) scales by 1). Its mask, when something reads it,
// is not the identity's.
bool is_identity_dropout(const PatternView& view, const ir::Op& op) {
  if (op.outputs.size() > 1 && has_readers(view, op.outputs[1])) return false;
  const ir::TensorId training = op.inputs.size() > 2 ? op.inputs[2] : -1;
  if (training < 0) return true;
  if (const auto mode = bool_scalar(view.graph(), training); mode && !*mode) return true;
  const ir::TensorId ratio = op.inputs.size() > 1 ? op.inputs[1] : -1;
  const auto value = view.scalar(ratio);
  return value && *value == 0.0f;
}

// A Slice whose steps are 1 and whose output has its input's shape takes every element.
bool is_whole_slice(const PatternView& view, const ir::Op& op) {
  if (op.inputs.size() > 4 && op.inputs[4] >= 0) {
    const auto steps = view.ints(op.inputs[4]);
    if (!steps) return false;
    for (int64_t step : *steps) {
      if (step != 1) return false;
    }
  }
  return true;
}

// Whether `op` writes its first input, unchanged, as its only output that is read.
bool is_no_op(const PatternView& view, const ir::Op& op) {
  if (op.inputs.empty() || op.inputs[0] < 0 || op.outputs.empty() || op.outputs[0] < 0) {
    return false;
  }
  const ir::Tensor& in = view.graph().tensor(op.inputs[0]);
  const ir::Tensor& out = view.graph().tensor(op.outputs[0]);
  if (in.dtype != out.dtype || in.shape != out.shape || op.outputs[0] == view.graph().loss) {
    return false;
  }
  if (op.type == "Identity") return true;
  if (op.type == "Cast")
    return ir::attr_int(op.attributes, "to", -1) == ir::onnx_data_type(in.dtype);
  if (op.type == "Dropout") return is_identity_dropout(view, op);
  if (op.type == "Slice") return is_whole_slice(view, op);
  return op.type == "Expand" || op.type == "Reshape";
}

// The float32 value of an op on one-element float32 constants, computed as the CPU kernel
// computes it; nullopt for other ops.
std::optional<float> evaluate(const std::string& type, const std::vector<float>& in) {
  using Unary = std::function<float(float)>;
  using Binary = std::function<float(float, float)>;
  static const std::map<std::string, Unary> kUnary = {
      {"Sqrt", [](float x) { return std::sqrt(x); }},
      {"Neg", [](float x) { return -x; }},
      {"Reciprocal", [](float x) { return 1.0f / x; }},
      {"Cast", [](float x) { return x; }},
  };
  static const std::map<std::string, Binary> kBinary = {
      {"Add", [](float a, float b) { return a + b; }},
      {"Sub", [](float a, float b) { return a - b; }},
      {"Mul", [](float a, float b) { return a * b; }},
      {"Div", [](float a, float b) { return a / b; }},
      {"Pow", [](float a, float b) { return std::pow(a, b); }},
  };
  if (const auto unary = kUnary.find(type); unary != kUnary.end() && in.size() == 1) {
    return unary->second(in[0]);
  }
  if (const auto binary = kBinary.find(type); binary != kBinary.end() && in.size() == 2) {
    return binary->second(in[0], in[1]);
  }
  return std::nullopt;
}

}  // namespace

int remove_no_ops(ir::OpGraph& graph) {
  const PatternView view(graph);
  std::vector<ir::TensorId> alias(graph.num_tensors());
  for (ir::TensorId t = 0; t < graph.num_tensors(); ++t) alias[t] = t;
  std::vector<KeptOp> kept;
  for (const ir::Op& original : graph.ops()) {
    ir::Op op = original;
    for (ir::TensorId& in : op.inputs) {
      if (in >= 0) in = alias[in];
    }
    if (op.pass == ir::Pass::kForward && is_no_op(view, original)) {
      alias[op.outputs[0]] = op.inputs[0];
      continue;
    }
    kept.push_back({std::move(op), {}});
  }
  const int removed = graph.num_ops() - static_cast<int>(kept.size());
  if (removed > 0) graph = rebuild(graph, std::move(kept));
  return removed;
}

int fold_scalar_constants(ir::OpGraph& graph) {
  // The view reads the tensors as they are folded, so a chain of scalars folds in one pass.
  const PatternView view(graph);
  std::vector<KeptOp> kept;
  for (const ir::Op& op : graph.ops()) {
    std::vector<float> in;
    for (ir::TensorId t : op.inputs) {
      if (const auto value = view.scalar(t)) in.push_back(*value);
    }
    const bool all_scalars = !op.inputs.empty() && in.size() == op.inputs.size();
    const ir::TensorId out = op.outputs.empty() ? -1 : op.outputs[0];
    std::optional<float> value;
    if (all_scalars && op.outputs.size() == 1 && out != graph.loss &&
        graph.tensor(out).dtype == ir::DType::kFloat32 &&
        ir::num_elements(graph.tensor(out).shape) == 1) {
      value = evaluate(op.type, in);
    }
    if (!value) {
      kept.push_back({op, {}});
      continue;
    }
    ir::Tensor& folded = graph.tensor(out);
    folded.role = ir::Role::kConstant;
    folded.data.resize(sizeof(float));
    std::memcpy(folded.data.data(), &*value, sizeof(float));
  }
  const int folded = graph.num_ops() - static_cast<int>(kept.size());
  if (folded > 0) graph = rebuild(graph, std::move(kept));
  return folded;
}

int remove_dead_ops(ir::OpGraph& graph) {
  std::vector<bool> read(graph.num_tensors(), false);
  read[graph.loss] = true;
  std::vector<bool> live(graph.num_ops(), false);
  for (ir::OpId id = graph.num_ops() - 1; id >= 0; --id) {
    const ir::Op& op = graph.op(id);
    for (ir::TensorId out : op.outputs) {
      if (out >= 0 && read[out]) live[id] = true;
    }
    if (!live[id]) continue;
    for (ir::TensorId in : op.inputs) {
      if (in >= 0) read[in] = true;
    }
  }
  std::vector<KeptOp> kept;
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    if (live[id]) kept.push_back({graph.op(id), {}});
  }
  const int removed = graph.num_ops() - static_cast<int>(kept.size());
  if (removed > 0) graph = rebuild(graph, std::move(kept));
  return removed;
}

}  // namespace piper::planner
