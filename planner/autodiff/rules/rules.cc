#include "planner/autodiff/rules/rules.h"

#include "formats/error.h"

namespace piper::planner {

void no_gradient(GradientBuilder& g) {
  for (size_t i = 0; i < g.op().inputs.size(); ++i) {
    if (g.wants(i)) {
      throw Error("node '" + g.op().name + "' (" + g.op().type + "): Piper has no gradient for " +
                  "input " + std::to_string(i) + ", but the loss depends on it through this op");
    }
  }
}

const GradientRules& gradient_rules() {
  static const GradientRules kRules = [] {
    GradientRules rules;
    add_linear_algebra_rules(rules);
    add_elementwise_rules(rules);
    add_shape_rules(rules);
    add_reduction_rules(rules);
    add_loss_rules(rules);
    add_indexing_rules(rules);
    add_layout_rules(rules);
    add_einsum_rules(rules);
    add_math_rules(rules);
    add_normalization_rules(rules);
    add_dropout_rules(rules);
    add_logical_rules(rules);
    add_fused_rules(rules);
    return rules;
  }();
  return kRules;
}

}  // namespace piper::planner
