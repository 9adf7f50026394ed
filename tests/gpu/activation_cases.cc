// Activations with attributes, Clip, PRelu and their gradients: default and explicit attributes,
// inputs across the kinks and exponential regions, NaN propagation, Clip with either bound
// omitted, bfloat16 through the widened path.
#include <limits>

#include "tests/gpu/cases.h"

namespace piper::engine::testing {

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
  return cases;
}

}  // namespace piper::engine::testing
