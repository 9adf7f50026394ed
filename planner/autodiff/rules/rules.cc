#include "planner/autodiff/rules/rules.h"

namespace piper::planner {

const GradientRules& gradient_rules() {
  static const GradientRules kRules = [] {
    GradientRules rules;
    add_linear_algebra_rules(rules);
    add_elementwise_rules(rules);
    add_shape_rules(rules);
    add_reduction_rules(rules);
    add_loss_rules(rules);
    return rules;
  }();
  return kRules;
}

}  // namespace piper::planner
