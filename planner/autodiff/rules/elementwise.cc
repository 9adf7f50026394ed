// Broadcasting arithmetic, activations and the other element-wise unary ops.
#include "formats/error.h"
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

// Y = PRelu(X, slope) = X where X > 0, slope · X elsewhere (slope broadcast to X). With
// P = dY · [X > 0] (ReluGrad reading X) and N = dY − P: dX = P + N · slope and
// dSlope = N · X summed down to slope's shape; 0 counts as negative, as in PyTorch.
void prelu_rule(GradientBuilder& g) {
  const ir::TensorId dy = g.output_gradient(0);
  const ir::TensorId x = g.op().inputs[0];
  const ir::Shape shape = g.input_shape(0);
  const ir::TensorId positive = g.emit("piper.ReluGrad", {dy, x}, shape);
  const ir::TensorId negative = g.emit("Sub", {dy, positive}, shape);
  if (g.wants(0)) {
    const ir::TensorId scaled = g.emit("Mul", {negative, g.op().inputs[1]}, shape);
    g.contribute(0, g.emit("Add", {positive, scaled}, shape));
  }
  if (g.wants(1)) g.contribute(1, g.sum_to_input(g.emit("Mul", {negative, x}, shape), 1));
}

void neg_rule(GradientBuilder& g) {
  g.contribute(0, g.emit("Neg", {g.output_gradient(0)}, g.input_shape(0)));
}

// Activations whose derivative is a function of one saved tensor, their output Y or (with
// kUsesInput) their input X, and of their attributes, which the gradient op carries.
template <const char* kGradOp, bool kUsesInput = false>
void activation_rule(GradientBuilder& g) {
  const ir::TensorId saved = kUsesInput ? g.op().inputs[0] : g.op().outputs[0];
  g.contribute(0,
               g.emit(kGradOp, {g.output_gradient(0), saved}, g.input_shape(0), g.op().attributes));
}

constexpr char kReluGrad[] = "piper.ReluGrad";
constexpr char kTanhGrad[] = "piper.TanhGrad";
constexpr char kSigmoidGrad[] = "piper.SigmoidGrad";
constexpr char kAbsGrad[] = "piper.AbsGrad";
constexpr char kLeakyReluGrad[] = "piper.LeakyReluGrad";
constexpr char kSoftplusGrad[] = "piper.SoftplusGrad";  // from Y
constexpr char kEluGrad[] = "piper.EluGrad";
constexpr char kSeluGrad[] = "piper.SeluGrad";
constexpr char kCeluGrad[] = "piper.CeluGrad";
constexpr char kHardSigmoidGrad[] = "piper.HardSigmoidGrad";
constexpr char kHardSwishGrad[] = "piper.HardSwishGrad";
constexpr char kSoftsignGrad[] = "piper.SoftsignGrad";
constexpr char kThresholdedReluGrad[] = "piper.ThresholdedReluGrad";
// Trigonometric and hyperbolic functions: one kernel over dY and X (Tan: Y), where the same
// derivative from existing ops would take two to four kernels and their temporaries.
constexpr char kSinGrad[] = "piper.SinGrad";
constexpr char kCosGrad[] = "piper.CosGrad";
constexpr char kTanGrad[] = "piper.TanGrad";  // from Y
constexpr char kSinhGrad[] = "piper.SinhGrad";
constexpr char kCoshGrad[] = "piper.CoshGrad";
constexpr char kAsinGrad[] = "piper.AsinGrad";
constexpr char kAcosGrad[] = "piper.AcosGrad";
constexpr char kAtanGrad[] = "piper.AtanGrad";
constexpr char kAsinhGrad[] = "piper.AsinhGrad";
constexpr char kAcoshGrad[] = "piper.AcoshGrad";
constexpr char kAtanhGrad[] = "piper.AtanhGrad";

// Floor, Ceil, Round and Sign are piecewise constant: dX = 0 wherever the derivative exists,
// and PyTorch gives zeros (not no gradient) there too, so a parameter reached only through
// them still gets a (zero) gradient and its optimizer step, weight decay included.
void zero_gradient_rule(GradientBuilder& g) {
  const ir::Shape shape = g.input_shape(0);
  const ir::TensorId zeros = g.emit("ConstantOfShape", {g.constant(shape)}, shape);
  g.contribute(0, g.cast(zeros, g.dtype(g.op().inputs[0])));
}

// Y = Clip(X, min, max): dX = dY where X passed through (X = Y), as PyTorch's clamp. The
// bounds are constants in exported models; a bound that needs a gradient is refused.
void clip_rule(GradientBuilder& g) {
  if (g.wants(1) || g.wants(2)) {
    throw Error("node '" + g.op().name +
                "' (Clip): gradients of the min and max inputs are not supported");
  }
  if (!g.wants(0)) return;
  const std::vector<ir::TensorId> inputs = {g.output_gradient(0), g.op().inputs[0],
                                            g.op().outputs[0]};
  g.contribute(0, g.emit("piper.ClipGrad", inputs, g.input_shape(0)));
}

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
  rules["Abs"] = activation_rule<kAbsGrad, true>;
  rules["LeakyRelu"] = activation_rule<kLeakyReluGrad, true>;
  rules["Softplus"] = activation_rule<kSoftplusGrad>;
  rules["Elu"] = activation_rule<kEluGrad, true>;
  rules["Selu"] = activation_rule<kSeluGrad, true>;
  rules["Celu"] = activation_rule<kCeluGrad, true>;
  rules["HardSigmoid"] = activation_rule<kHardSigmoidGrad, true>;
  rules["HardSwish"] = activation_rule<kHardSwishGrad, true>;
  rules["Softsign"] = activation_rule<kSoftsignGrad, true>;
  rules["ThresholdedRelu"] = activation_rule<kThresholdedReluGrad, true>;
  rules["Sin"] = activation_rule<kSinGrad, true>;
  rules["Cos"] = activation_rule<kCosGrad, true>;
  rules["Tan"] = activation_rule<kTanGrad>;
  rules["Sinh"] = activation_rule<kSinhGrad, true>;
  rules["Cosh"] = activation_rule<kCoshGrad, true>;
  rules["Asin"] = activation_rule<kAsinGrad, true>;
  rules["Acos"] = activation_rule<kAcosGrad, true>;
  rules["Atan"] = activation_rule<kAtanGrad, true>;
  rules["Asinh"] = activation_rule<kAsinhGrad, true>;
  rules["Acosh"] = activation_rule<kAcoshGrad, true>;
  rules["Atanh"] = activation_rule<kAtanhGrad, true>;
  for (const char* type : {"Floor", "Ceil", "Round", "Sign"}) rules[type] = zero_gradient_rule;
  for (const char* type : {"IsNaN", "IsInf"}) rules[type] = no_gradient;  // bool outputs
  rules["Clip"] = clip_rule;
  rules["PRelu"] = prelu_rule;
}

}  // namespace piper::planner
