// Activations with attributes, the trigonometric, hyperbolic and rounding ops, Sign, IsNaN,
// IsInf, Clip, PRelu and their gradients: default and explicit attributes, inputs across the
// kinks, domains' edges and exponential regions, halves for Round, NaN propagation, int64 Abs
// and Sign, Clip with either bound omitted, bfloat16 through the widened path.
#include <limits>

#include "tests/gpu/cases.h"

namespace piper::engine::testing {

namespace {

std::vector<OpCase> UnaryMathCases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const TensorSpec kinks = Values({8}, plan::FLOAT32, {-3, -1, 0, -0.0, 0.5, 3, 30, nan});
  const TensorSpec halves = Values(
      {12}, plan::FLOAT32, {-2.5, -1.5, -0.5, -0.0, 0.5, 1.5, 2.5, 1.7, -1.2, 1e8, inf, nan});
  const TensorSpec classes = Values({6}, plan::FLOAT32, {1, -inf, nan, inf, -0.0, 3e38});
  const TensorSpec ints = Values({5}, plan::INT64, {-9223372036854775808.0, -7, 0, 7, 1});
  return {
      {"Softsign", "Softsign", {}, {kinks}, {F({8})}},
      {"ThresholdedRelu_default", "ThresholdedRelu", {}, {kinks}, {F({8})}},
      {"ThresholdedRelu_alpha", "ThresholdedRelu", {Float("alpha", 0.5)}, {kinks}, {F({8})}},
      {"Sin", "Sin", {}, {F({100}, -10, 10)}, {F({100})}},
      {"Sin_bfloat16", "Sin", {}, {BF({64}, -3, 3)}, {BF({64})}, 1e-2, 1e-2},
      {"Cos", "Cos", {}, {F({100}, -10, 10)}, {F({100})}},
      {"Tan", "Tan", {}, {F({100}, -1.5, 1.5)}, {F({100})}},
      {"Sinh", "Sinh", {}, {F({100}, -5, 5)}, {F({100})}},
      {"Cosh", "Cosh", {}, {F({100}, -5, 5)}, {F({100})}},
      {"Asin", "Asin", {}, {kinks}, {F({8})}},
      {"Acos", "Acos", {}, {F({100}, -1, 1)}, {F({100})}},
      {"Atan", "Atan", {}, {F({100}, -5, 5)}, {F({100})}},
      {"Asinh", "Asinh", {}, {F({100}, -5, 5)}, {F({100})}},
      {"Acosh", "Acosh", {}, {F({100}, 1, 5)}, {F({100})}},
      {"Atanh", "Atanh", {}, {kinks}, {F({8})}},
      {"Floor", "Floor", {}, {halves}, {F({12})}},
      {"Ceil", "Ceil", {}, {halves}, {F({12})}},
      {"Round", "Round", {}, {halves}, {F({12})}},
      {"Sign", "Sign", {}, {kinks}, {F({8})}},
      {"Sign_int64", "Sign", {}, {ints}, {I({5}, 0, 1)}},
      {"Abs_int64", "Abs", {}, {ints}, {I({5}, 0, 1)}},
      {"IsNaN", "IsNaN", {}, {classes}, {B({6})}},
      {"IsInf", "IsInf", {}, {classes}, {B({6})}},
      {"IsInf_positive", "IsInf", {Int("detect_negative", 0)}, {classes}, {B({6})}},
      {"IsInf_negative", "IsInf", {Int("detect_positive", 0)}, {classes}, {B({6})}},
      {"SoftsignGrad", "piper.SoftsignGrad", {}, {F({8}), kinks}, {F({8})}},
      {"ThresholdedReluGrad",
       "piper.ThresholdedReluGrad",
       {Float("alpha", 0.5)},
       {F({8}), kinks},
       {F({8})}},
      {"SinGrad", "piper.SinGrad", {}, {F({50}), F({50}, -10, 10)}, {F({50})}},
      {"CosGrad", "piper.CosGrad", {}, {F({50}), F({50}, -10, 10)}, {F({50})}},
      {"TanGrad", "piper.TanGrad", {}, {F({50}), F({50}, -10, 10)}, {F({50})}},
      {"SinhGrad", "piper.SinhGrad", {}, {F({50}), F({50}, -5, 5)}, {F({50})}},
      {"CoshGrad", "piper.CoshGrad", {}, {F({50}), F({50}, -5, 5)}, {F({50})}},
      {"AsinGrad", "piper.AsinGrad", {}, {F({50}), F({50}, -0.99, 0.99)}, {F({50})}},
      {"AcosGrad", "piper.AcosGrad", {}, {F({50}), F({50}, -0.99, 0.99)}, {F({50})}},
      {"AtanGrad", "piper.AtanGrad", {}, {F({50}), F({50}, -5, 5)}, {F({50})}},
      {"AsinhGrad", "piper.AsinhGrad", {}, {F({50}), F({50}, -5, 5)}, {F({50})}},
      {"AcoshGrad", "piper.AcoshGrad", {}, {F({50}), F({50}, 1.01, 5)}, {F({50})}},
      {"AtanhGrad", "piper.AtanhGrad", {}, {F({50}), F({50}, -0.99, 0.99)}, {F({50})}},
  };
}

}  // namespace

std::vector<OpCase> ActivationCases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const TensorSpec kinks = Values({8}, plan::FLOAT32, {-3, -1, 0, -0.0, 0.5, 3, 30, nan});
  std::vector<OpCase> cases = {
      {"Abs", "Abs", {}, {kinks}, {F({8})}},
      {"LeakyRelu_default", "LeakyRelu", {}, {kinks}, {F({8})}},
      {"LeakyRelu_alpha", "LeakyRelu", {Float("alpha", 0.2)}, {F({100}, -5, 5)}, {F({100})}},
      {"Softplus", "Softplus", {}, {F({200}, -40, 40)}, {F({200})}},
      {"Elu_default", "Elu", {}, {F({100}, -5, 5)}, {F({100})}},
      {"Elu_alpha", "Elu", {Float("alpha", 0.5)}, {kinks}, {F({8})}},
      {"Selu_default", "Selu", {}, {F({100}, -5, 5)}, {F({100})}},
      {"Selu_alpha_gamma",
       "Selu",
       {Float("alpha", 2.0), Float("gamma", 3.0)},
       {F({50}, -5, 5)},
       {F({50})}},
      {"Celu_alpha", "Celu", {Float("alpha", 2.0)}, {F({100}, -5, 5)}, {F({100})}},
      {"HardSigmoid_default", "HardSigmoid", {}, {F({100}, -5, 5)}, {F({100})}},
      {"HardSigmoid_alpha_beta",
       "HardSigmoid",
       {Float("alpha", 1.0 / 6), Float("beta", 0.5)},
       {kinks},
       {F({8})}},
      {"HardSwish", "HardSwish", {}, {F({100}, -5, 5)}, {F({100})}},
      {"HardSwish_bfloat16", "HardSwish", {}, {BF({64}, -5, 5)}, {BF({64})}, 1e-2, 1e-2},
      {"Clip",
       "Clip",
       {},
       {F({6, 7}), Values({}, plan::FLOAT32, {-0.5}), Values({}, plan::FLOAT32, {0.25})},
       {F({6, 7})}},
      {"Clip_no_min", "Clip", {}, {kinks, Omitted(), Values({}, plan::FLOAT32, {6})}, {F({8})}},
      {"Clip_no_bounds", "Clip", {}, {F({9})}, {F({9})}},
      {"PRelu_broadcast", "PRelu", {}, {F({4, 3, 5}), F({3, 1})}, {F({4, 3, 5})}},
      {"PRelu_bfloat16", "PRelu", {}, {BF({6, 4}), BF({4})}, {BF({6, 4})}, 1e-2, 1e-2},
      {"AbsGrad", "piper.AbsGrad", {}, {F({8}), kinks}, {F({8})}},
      {"LeakyReluGrad", "piper.LeakyReluGrad", {Float("alpha", 0.2)}, {F({8}), kinks}, {F({8})}},
      {"SoftplusGrad", "piper.SoftplusGrad", {}, {F({50}), F({50}, 0, 30)}, {F({50})}},
      {"EluGrad", "piper.EluGrad", {Float("alpha", 0.5)}, {F({50}), F({50}, -5, 5)}, {F({50})}},
      {"SeluGrad", "piper.SeluGrad", {}, {F({50}), F({50}, -5, 5)}, {F({50})}},
      {"CeluGrad", "piper.CeluGrad", {Float("alpha", 2.0)}, {F({50}), F({50}, -5, 5)}, {F({50})}},
      {"HardSigmoidGrad", "piper.HardSigmoidGrad", {}, {F({50}), F({50}, -5, 5)}, {F({50})}},
      {"HardSwishGrad", "piper.HardSwishGrad", {}, {F({8}), kinks}, {F({8})}},
      {"ClipGrad",
       "piper.ClipGrad",
       {},
       {F({4}), Values({4}, plan::FLOAT32, {-1, 0.5, 2, nan}),
        Values({4}, plan::FLOAT32, {0, 0.5, 1, nan})},
       {F({4})}},
  };
  std::vector<OpCase> unary = UnaryMathCases();
  cases.insert(cases.end(), unary.begin(), unary.end());
  return cases;
}

}  // namespace piper::engine::testing
