#include "planner/fusion/fusion.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

#include "planner/fusion/graph_rewrite.h"

namespace piper::planner {

PatternView::PatternView(const ir::OpGraph& graph)
    : graph_(graph),
      producer_(graph.num_tensors(), -1),
      consumers_(graph.num_tensors()),
      fixed_(graph.num_tensors(), false) {
  for (ir::TensorId t = 0; t < graph.num_tensors(); ++t) {
    const ir::Role role = graph.tensor(t).role;
    fixed_[t] = role == ir::Role::kConstant || role == ir::Role::kInput;
  }
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    const ir::Op& op = graph.op(id);
    const bool fixed = std::all_of(op.inputs.begin(), op.inputs.end(),
                                   [&](ir::TensorId in) { return in < 0 || fixed_[in]; });
    for (ir::TensorId out : op.outputs) {
      if (out < 0) continue;
      producer_[out] = id;
      fixed_[out] = fixed;
    }
    for (ir::TensorId in : op.inputs) {
      if (in < 0) continue;
      std::vector<ir::OpId>& readers = consumers_[in];
      if (readers.empty() || readers.back() != id) readers.push_back(id);
    }
  }
}

ir::OpId PatternView::producer(ir::TensorId tensor, const std::string& type) const {
  if (tensor < 0) return -1;
  const ir::OpId id = producer_[tensor];
  return id >= 0 && graph_.op(id).type == type ? id : -1;
}

const std::vector<ir::OpId>& PatternView::consumers(ir::TensorId tensor) const {
  return consumers_.at(tensor);
}

std::optional<float> PatternView::scalar(ir::TensorId tensor) const {
  if (tensor < 0) return std::nullopt;
  const ir::Tensor& t = graph_.tensor(tensor);
  if (t.role != ir::Role::kConstant || t.dtype != ir::DType::kFloat32 ||
      t.data.size() != sizeof(float)) {
    return std::nullopt;
  }
  float value;
  std::memcpy(&value, t.data.data(), sizeof(float));
  return value;
}

std::optional<std::vector<int64_t>> PatternView::ints(ir::TensorId tensor) const {
  if (tensor < 0) return std::nullopt;
  const ir::Tensor& t = graph_.tensor(tensor);
  if (t.role != ir::Role::kConstant || t.dtype != ir::DType::kInt64 ||
      t.data.size() != static_cast<size_t>(ir::num_elements(t.shape)) * sizeof(int64_t)) {
    return std::nullopt;
  }
  std::vector<int64_t> values(t.data.size() / sizeof(int64_t));
  std::memcpy(values.data(), t.data.data(), t.data.size());
  return values;
}

std::optional<PatternView::ScalarOperand> PatternView::with_scalar(ir::TensorId tensor,
                                                                   const std::string& type) const {
  const ir::OpId id = producer(tensor, type);
  if (id < 0 || graph_.op(id).inputs.size() != 2) return std::nullopt;
  const ir::Op& op = graph_.op(id);
  const bool commutative = type == "Add" || type == "Mul";
  for (size_t i : {size_t{1}, size_t{0}}) {
    if (i == 0 && !commutative) break;
    if (const auto value = scalar(op.inputs[i])) return ScalarOperand{id, op.inputs[1 - i], *value};
  }
  return std::nullopt;
}

bool broadcasts_to(const ir::Shape& from, const ir::Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t offset = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != 1 && from[d] != to[offset + d]) return false;
  }
  return true;
}

std::vector<std::unique_ptr<FusionRule>> default_fusion_rules() {
  std::vector<std::unique_ptr<FusionRule>> rules;
  rules.push_back(make_attention_rule());
  rules.push_back(make_layer_norm_rule());
  rules.push_back(make_bias_gelu_rule());
  rules.push_back(make_linear_rule());
  rules.push_back(make_linear_gelu_rule());
  return rules;
}

namespace {

// The conditions every fusion must meet: the root is the last matched op (so the fused op,
// written in its place, comes after everything it reads), the matched ops share the root's
// tags, and every value they compute other than the root's outputs is read only inside the
// match and is not the loss.
bool self_contained(const PatternView& view, ir::OpId root, const Fusion& fusion) {
  const std::set<ir::OpId> matched(fusion.matched.begin(), fusion.matched.end());
  if (!matched.count(root) || *matched.rbegin() != root) return false;
  const ir::Op& last = view.op(root);
  for (ir::OpId id : matched) {
    const ir::Op& op = view.op(id);
    if (op.tags != last.tags || op.pass != ir::Pass::kForward) return false;
    if (id == root) continue;
    for (ir::TensorId out : op.outputs) {
      if (out < 0) continue;
      if (out == view.graph().loss) return false;
      for (ir::OpId reader : view.consumers(out)) {
        if (!matched.count(reader)) return false;
      }
    }
  }
  return true;
}

// The graph without the matched ops and each fusion's op in place of its root.
ir::OpGraph rewrite(const ir::OpGraph& graph, std::map<ir::OpId, Fusion> fusions) {
  std::vector<bool> removed(graph.num_ops(), false);
  for (const auto& [root, fusion] : fusions) {
    for (ir::OpId id : fusion.matched) removed[id] = id != root;
  }
  std::vector<KeptOp> kept;
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    if (removed[id]) continue;
    const ir::Op& original = graph.op(id);
    const auto fusion = fusions.find(id);
    if (fusion == fusions.end()) {
      kept.push_back({original, {}});
      continue;
    }
    ir::Op op = std::move(fusion->second.fused);
    op.name = original.name;
    op.tags = original.tags;
    op.pass = ir::Pass::kForward;
    op.outputs = original.outputs;
    kept.push_back({std::move(op), std::move(fusion->second.new_constants)});
  }
  return rebuild(graph, std::move(kept));
}

}  // namespace

std::map<std::string, int> fuse(ir::OpGraph& graph,
                                const std::vector<std::unique_ptr<FusionRule>>& rules) {
  if (!graph.trained.empty() || graph.loss_seed >= 0) {
    throw std::logic_error("fusion runs on the forward graph, before autodiff");
  }
  std::map<std::string, int> counts;
  remove_no_ops(graph);
  fold_scalar_constants(graph);
  for (const auto& rule : rules) {
    std::map<ir::OpId, Fusion> fusions;
    {
      const PatternView view(graph);
      std::vector<bool> taken(graph.num_ops(), false);
      for (ir::OpId root = graph.num_ops() - 1; root >= 0; --root) {
        if (taken[root]) continue;
        std::optional<Fusion> fusion = rule->match(view, root);
        if (!fusion || !self_contained(view, root, *fusion)) continue;
        if (std::any_of(fusion->matched.begin(), fusion->matched.end(),
                        [&](ir::OpId id) { return taken[id]; })) {
          continue;
        }
        for (ir::OpId id : fusion->matched) taken[id] = true;
        fusions.emplace(root, std::move(*fusion));
      }
    }
    counts[rule->name()] = static_cast<int>(fusions.size());
    if (!fusions.empty()) graph = rewrite(graph, std::move(fusions));
  }
  remove_dead_ops(graph);
  return counts;
}

}  // namespace piper::planner
