// Dropout: the backward reuses the forward's mask, which the forward is made to output.
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

void dropout_rule(GradientBuilder& g) {
  const ir::TensorId mask = g.ensure_output(1, "mask", ir::DType::kBool, g.input_shape(0));
  std::vector<ir::TensorId> inputs = {g.output_gradient(0), mask};
  if (g.has_input(2)) {
    inputs.push_back(g.op().inputs[1]);  // -1 when the ratio is omitted
    inputs.push_back(g.op().inputs[2]);
  } else if (g.has_input(1)) {
    inputs.push_back(g.op().inputs[1]);
  }
  g.contribute(0, g.emit("piper.DropoutGrad", inputs, g.input_shape(0)));
}

}  // namespace

void add_dropout_rules(GradientRules& rules) { rules["Dropout"] = dropout_rule; }

}  // namespace piper::planner
