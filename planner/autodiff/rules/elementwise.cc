// Broadcasting arithmetic and activations.
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

void add_rule(GradientBuilder& g) {
  const ir::TensorId dy = g.output_gradient(0);
  for (size_t i = 0; i < g.op().inputs.size(); ++i) {
    if (g.wants(i)) g.contribute(i, g.sum_to_input(dy, i));
  }
}

void sub_rule(GradientBuilder& g) {
  const ir::TensorId dy = g.output_gradient(0);
  if (g.wants(0)) g.contribute(0, g.sum_to_input(dy, 0));
  if (g.wants(1)) {
    const ir::TensorId reduced = g.sum_to_input(dy, 1);
    g.contribute(1, g.emit("Neg", {reduced}, g.input_shape(1)));
  }
}

void mul_rule(GradientBuilder& g) {
  const ir::TensorId dy = g.output_gradient(0);
  const ir::Shape out = g.output_shape(0);
  for (size_t i = 0; i < 2; ++i) {
    if (!g.wants(i)) continue;
    const ir::TensorId product = g.emit("Mul", {dy, g.op().inputs[1 - i]}, out);
    g.contribute(i, g.sum_to_input(product, i));
  }
}

void div_rule(GradientBuilder& g) {
  // Y = A / B: dA = dY / B, dB = -dY * Y / B.
  const ir::TensorId dy = g.output_gradient(0);
  const ir::TensorId b = g.op().inputs[1];
  const ir::Shape out = g.output_shape(0);
  if (g.wants(0)) g.contribute(0, g.sum_to_input(g.emit("Div", {dy, b}, out), 0));
  if (g.wants(1)) {
    const ir::TensorId ratio = g.emit("Div", {g.op().outputs[0], b}, out);
    const ir::TensorId product = g.emit("Mul", {dy, ratio}, out);
    const ir::TensorId reduced = g.sum_to_input(product, 1);
    g.contribute(1, g.emit("Neg", {reduced}, g.input_shape(1)));
  }
}

void neg_rule(GradientBuilder& g) {
  g.contribute(0, g.emit("Neg", {g.output_gradient(0)}, g.input_shape(0)));
}

// Activations whose derivative is a function of their output Y.
template <const char* kGradOp>
void activation_rule(GradientBuilder& g) {
  g.contribute(0, g.emit(kGradOp, {g.output_gradient(0), g.op().outputs[0]}, g.input_shape(0)));
}

constexpr char kReluGrad[] = "piper.ReluGrad";
constexpr char kTanhGrad[] = "piper.TanhGrad";
constexpr char kSigmoidGrad[] = "piper.SigmoidGrad";

}  // namespace

void add_elementwise_rules(GradientRules& rules) {
  rules["Add"] = add_rule;
  rules["Sum"] = add_rule;
  rules["Sub"] = sub_rule;
  rules["Mul"] = mul_rule;
  rules["Div"] = div_rule;
  rules["Neg"] = neg_rule;
  rules["Relu"] = activation_rule<kReluGrad>;
  rules["Tanh"] = activation_rule<kTanhGrad>;
  rules["Sigmoid"] = activation_rule<kSigmoidGrad>;
}

}  // namespace piper::planner
