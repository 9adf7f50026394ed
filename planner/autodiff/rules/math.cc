// Elementwise math: Pow, Sqrt, Reciprocal, Exp, Log, Erf and the n-ary Max and Min.
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

// Y = A ^ B: dA = dY · B · A^(B−1), dB = dY · Y · log(A), each then summed down to its
// input's broadcast shape. The zero cases follow PyTorch (see docs/plan-format.md).
void pow_rule(GradientBuilder& g) {
  const ir::TensorId dy = g.output_gradient(0);
  const ir::TensorId a = g.op().inputs[0];
  const ir::TensorId b = g.op().inputs[1];
  const ir::Shape out = g.output_shape(0);
  if (g.wants(0)) {
    g.contribute(0, g.sum_to_input(g.emit("piper.PowBaseGrad", {dy, a, b}, out), 0));
  }
  if (g.wants(1)) {
    const ir::TensorId y = g.op().outputs[0];
    g.contribute(1, g.sum_to_input(g.emit("piper.PowExponentGrad", {dy, a, y}, out), 1));
  }
}

// Ops whose derivative is a function of the output gradient and one saved tensor
// (the op's output Y, or its input X when kUsesInput).
template <const char* kGradOp, bool kUsesInput>
void saved_tensor_rule(GradientBuilder& g) {
  const ir::TensorId saved = kUsesInput ? g.op().inputs[0] : g.op().outputs[0];
  g.contribute(0, g.emit(kGradOp, {g.output_gradient(0), saved}, g.input_shape(0)));
}

constexpr char kMul[] = "Mul";                              // Exp: dX = dY · Y
constexpr char kDiv[] = "Div";                              // Log: dX = dY / X
constexpr char kSqrtGrad[] = "piper.SqrtGrad";              // dX = dY / (2 Y)
constexpr char kReciprocalGrad[] = "piper.ReciprocalGrad";  // dX = −dY · Y²
constexpr char kErfGrad[] = "piper.ErfGrad";                // dX = dY · 2/√π · exp(−X²)

// Max and Min: the gradient goes to the input(s) equal to the output, split evenly among
// ties (as PyTorch's maximum/minimum do for two inputs).
void extremum_rule(GradientBuilder& g) {
  const ir::TensorId dy = g.output_gradient(0);
  const size_t n = g.op().inputs.size();
  if (n == 1) {
    g.contribute(0, dy);
    return;
  }
  std::vector<ir::TensorId> inputs = {dy, g.op().outputs[0]};
  inputs.insert(inputs.end(), g.op().inputs.begin(), g.op().inputs.end());
  for (size_t i = 0; i < n; ++i) {
    if (!g.wants(i)) continue;
    const ir::TensorId full =
        g.emit("piper.MaxMinGrad", inputs, g.output_shape(0), {{"input", static_cast<int64_t>(i)}});
    g.contribute(i, g.sum_to_input(full, i));
  }
}

}  // namespace

void add_math_rules(GradientRules& rules) {
  rules["Pow"] = pow_rule;
  rules["Sqrt"] = saved_tensor_rule<kSqrtGrad, false>;
  rules["Reciprocal"] = saved_tensor_rule<kReciprocalGrad, false>;
  rules["Exp"] = saved_tensor_rule<kMul, false>;
  rules["Log"] = saved_tensor_rule<kDiv, true>;
  rules["Erf"] = saved_tensor_rule<kErfGrad, true>;
  rules["Max"] = extremum_rule;
  rules["Min"] = extremum_rule;
}

}  // namespace piper::planner
