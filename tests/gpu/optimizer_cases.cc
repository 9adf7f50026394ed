// Optimizers over three steps, so that bias correction and momentum start are covered, with
// and without the gradient norm that skips a step, under learning-rate schedules (the factor
// changes every step) with clipping that scales the gradient or leaves it; and the norm's sum
// of squares.
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
  // The optimizer recipe: cosine with a warm-up step and a floor, clipped at 1 by the norm 2.5;
  // linear with the norm 0.25 under the bound (unclipped).
  const std::vector<plan::Attribute> cosine = {Str("lr_schedule", "cosine"), Int("warmup_steps", 1),
                                               Int("total_steps", 3), Float("min_lr_ratio", 0.1),
                                               Float("clip_grad_norm", 1.0)};
  const std::vector<plan::Attribute> linear = {Str("lr_schedule", "linear"), Int("total_steps", 2),
                                               Float("clip_grad_norm", 1.0)};
  const auto with = [](OpCase c, const char* name, const std::vector<plan::Attribute>& extra) {
    c.name = name;
    c.attributes.insert(c.attributes.end(), extra.begin(), extra.end());
    return c;
  };
  std::vector<OpCase> cases = {adamw,
                               adamw_norm,
                               adamw_skipped,
                               sgd,
                               sgd_skipped,
                               plain,
                               plain_norm,
                               plain_skipped,
                               with(adamw_norm, "AdamW_cosine_clipped", cosine),
                               with(plain_norm, "SGD_plain_linear_unclipped", linear)};
  OpCase sgd_clipped = with(sgd, "SGD_nesterov_cosine_clipped", cosine);
  sgd_clipped.inputs.push_back(norm(2.5));
  cases.push_back(sgd_clipped);
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
