// Optimizers over three steps, so that bias correction and momentum start are covered, with
// and without the gradient norm that skips a step; and the norm's sum of squares.
#include <cmath>

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
  // With the global gradient norm: a finite one updates, a non-finite one changes nothing.
  const auto norm = [](double value) { return Values({}, plan::FLOAT32, {value}); };
  OpCase adamw_norm = adamw;
  adamw_norm.name = "AdamW_finite_norm";
  adamw_norm.inputs.push_back(norm(2.5));
  OpCase adamw_skipped = adamw;
  adamw_skipped.name = "AdamW_nan_norm";
  adamw_skipped.inputs.push_back(norm(std::nan("")));
  OpCase sgd_skipped = sgd;
  sgd_skipped.name = "SGD_nesterov_inf_norm";
  sgd_skipped.inputs.push_back(norm(INFINITY));
  OpCase plain_norm = plain;
  plain_norm.name = "SGD_plain_finite_norm";
  plain_norm.inputs.push_back(norm(0.25));
  OpCase plain_skipped = plain;
  plain_skipped.name = "SGD_plain_nan_norm";
  plain_skipped.inputs.push_back(norm(std::nan("")));
  std::vector<OpCase> cases = {adamw,       adamw_norm, adamw_skipped, sgd,
                               sgd_skipped, plain,      plain_norm,    plain_skipped};
  for (OpCase& c : cases) c.steps = 3;
  // Slices of three gradients, one of them long enough for many blocks of partial sums.
  cases.push_back({"SumSquares",
                   "piper.SumSquares",
                   {Ints("starts", {10, 0, 0}), Ints("counts", {500, 21, 300000})},
                   {F({1000}), F({7, 3}), F({300000})},
                   {F({})}});
  cases.push_back({"SumSquares_no_inputs",
                   "piper.SumSquares",
                   {Ints("starts", {}), Ints("counts", {})},
                   {},
                   {F({})}});
  return cases;
}

}  // namespace piper::engine::testing
