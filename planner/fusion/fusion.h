// The fusion pass: rewrites patterns of forward ops into one of Piper's fused ops
// (docs/plan-format.md), before autodiff, so that each fused op gets its own gradient rule
// and kernels. Rules match conservatively: a pattern fuses only when every value it computes
// on the way is read by nothing outside it, its ops share one tag tuple, and its shapes and
// constants are what the fused kernels implement; anything else is left as it was.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/ir/op_graph.h"

namespace piper::planner {

// Read-only access to a forward op graph with its producers and consumers indexed.
class PatternView {
 public:
  explicit PatternView(const ir::OpGraph& graph);

  const ir::OpGraph& graph() const { return graph_; }
  const ir::Op& op(ir::OpId id) const { return graph_.op(id); }
  const ir::Shape& shape(ir::TensorId id) const { return graph_.tensor(id).shape; }
  // The op writing `tensor` when its type is `type`, else -1.
  ir::OpId producer(ir::TensorId tensor, const std::string& type) const;
  const std::vector<ir::OpId>& consumers(ir::TensorId tensor) const;
  // The value of a float32 planner constant holding one element.
  std::optional<float> scalar(ir::TensorId tensor) const;
  // The values of an int64 planner constant.
  std::optional<std::vector<int64_t>> ints(ir::TensorId tensor) const;
  // An op of `type` (Add, Mul: either input; Div, Sub, Pow: the second) that writes `tensor`
  // from a scalar constant and one other input.
  struct ScalarOperand {
    ir::OpId op = -1;
    ir::TensorId other = -1;
    float value = 0;
  };
  std::optional<ScalarOperand> with_scalar(ir::TensorId tensor, const std::string& type) const;
  // Whether `tensor` holds values the planner fixes or the step feeds (a constant, a frozen
  // initializer, a batch input) or values computed from those alone: never a gradient to
  // compute.
  bool is_fixed(ir::TensorId tensor) const { return tensor >= 0 && fixed_[tensor]; }

 private:
  const ir::OpGraph& graph_;
  std::vector<ir::OpId> producer_;
  std::vector<std::vector<ir::OpId>> consumers_;
  std::vector<bool> fixed_;
};

// Whether `from` broadcasts (numpy rules, one way) to exactly `to`.
bool broadcasts_to(const ir::Shape& from, const ir::Shape& to);

// What a rule found: the matched ops and the fused op that replaces them, written in place of
// the last matched op (the root). The rule sets `fused`'s type, inputs and attributes; the
// pass gives it the root's name, tags and outputs.
struct Fusion {
  std::vector<ir::OpId> matched;
  ir::Op fused;
  // Planner constants the fused op reads that the graph lacks: (input index, tensor).
  std::vector<std::pair<size_t, ir::Tensor>> new_constants;
};

class FusionRule {
 public:
  virtual ~FusionRule() = default;
  // Kebab-case, for reports: "fuse-attention".
  virtual std::string name() const = 0;
  // The fusion whose root is `root`, or nullopt when the rule's pattern does not end there.
  // The pass checks the conditions every rule shares (intermediates read only inside the
  // match, one tag tuple); the rule checks structure, shapes and constants.
  virtual std::optional<Fusion> match(const PatternView& view, ir::OpId root) const = 0;
};

std::unique_ptr<FusionRule> make_attention_rule();    // attention_rule.cc
std::unique_ptr<FusionRule> make_layer_norm_rule();   // layer_norm_rule.cc
std::unique_ptr<FusionRule> make_bias_gelu_rule();    // bias_gelu_rule.cc
std::unique_ptr<FusionRule> make_linear_rule();       // linear_rule.cc
std::unique_ptr<FusionRule> make_linear_gelu_rule();  // linear_gelu_rule.cc

// The simplifications the fusion pass runs around its rules (simplify.cc); each returns the
// number of ops it removed. remove_no_ops: forward ops that write their input unchanged
// (Identity; Cast to the input's dtype; Dropout outside training mode or with ratio 0, its
// mask unread; Slice, Expand and Reshape to the input's shape), their readers reading the input
// instead. fold_scalar_constants: float32 arithmetic on one-element constants becomes a
// constant. remove_dead_ops: ops none of whose outputs the loss depends on.
int remove_no_ops(ir::OpGraph& graph);
int fold_scalar_constants(ir::OpGraph& graph);
int remove_dead_ops(ir::OpGraph& graph);

// Attention, then LayerNorm, then bias+GELU, then Linear layers (whose bias GELU has not taken),
// then Linear layers with the tanh GELU after them.
std::vector<std::unique_ptr<FusionRule>> default_fusion_rules();

// Removes no-ops and folds scalar constants, runs each rule over the forward op graph in turn
// (roots visited from the last op back, so the longest pattern ending at an op wins), removes
// what the fusions replaced and the ops left dead. Returns the number of fusions made per rule
// name. Call before autodiff.
std::map<std::string, int> fuse(ir::OpGraph& graph,
                                const std::vector<std::unique_ptr<FusionRule>>& rules);

}  // namespace piper::planner
