// Ops that only move or relabel elements.
#include <numeric>

#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

// Reshape, Flatten, Squeeze and Unsqueeze keep the element order: the
// gradient is the output gradient reshaped back.
void reshape_rule(GradientBuilder& g) {
  const ir::Shape shape = g.input_shape(0);
  const ir::TensorId target = g.constant(shape);
  g.contribute(0, g.emit("Reshape", {g.output_gradient(0), target}, shape));
}

void identity_rule(GradientBuilder& g) { g.contribute(0, g.output_gradient(0)); }

void transpose_rule(GradientBuilder& g) {
  const ir::Shape shape = g.input_shape(0);
  std::vector<int64_t> perm = ir::attr_ints(g.op().attributes, "perm");
  if (perm.empty()) {
    perm.resize(shape.size());
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  g.contribute(0, g.emit("Transpose", {g.output_gradient(0)}, shape, {{"perm", inverse}}));
}

}  // namespace

void add_shape_rules(GradientRules& rules) {
  rules["Reshape"] = reshape_rule;
  rules["Flatten"] = reshape_rule;
  rules["Squeeze"] = reshape_rule;
  rules["Unsqueeze"] = reshape_rule;
  rules["Identity"] = identity_rule;
  rules["Transpose"] = transpose_rule;
}

}  // namespace piper::planner
