// Comparisons, logical ops and Cast: their bool and integer outputs carry no gradient.
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

// Float to float casts the gradient back to the input's dtype; a cast from or to int64 or bool
// cuts it (such tensors never need a gradient, so autodiff only gets here for float to float).
void cast_rule(GradientBuilder& g) {
  const ir::DType from = g.dtype(g.op().inputs[0]);
  if (!ir::is_float(from) || !ir::is_float(g.dtype(g.op().outputs[0]))) {
    no_gradient(g);
    return;
  }
  g.contribute(0, g.cast(g.output_gradient(0), from));
}

}  // namespace

void add_logical_rules(GradientRules& rules) {
  rules["Cast"] = cast_rule;
  for (const char* type : {"Equal", "Less", "Greater", "Not"}) rules[type] = no_gradient;
}

}  // namespace piper::planner
