// Optimizers over three steps, so that bias correction and momentum start are covered.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> OptimizerCases() {
  OpCase adamw{"AdamW",
               "piper.AdamW",
               {Float("lr", 1e-2), Float("weight_decay", 0.1)},
               {F({1000}), F({1000}), F({1000}, -0.01, 0.01), F({1000}, 0, 0.01)},
               {}};
  OpCase sgd{
      "SGD_nesterov",
      "piper.SGD",
      {Float("lr", 0.1), Float("momentum", 0.9), Int("nesterov", 1), Float("weight_decay", 0.01)},
      {F({300}), F({300}), F({300})},
      {}};
  OpCase plain{"SGD_plain", "piper.SGD", {Float("lr", 0.5)}, {F({7, 3}), F({7, 3})}, {}};
  for (OpCase* c : {&adamw, &sgd, &plain}) c->steps = 3;
  return {adamw, sgd, plain};
}

}  // namespace piper::engine::testing
