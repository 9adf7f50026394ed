// SoftmaxCrossEntropyLoss and its gradient: every reduction, [N, C] and [N, C, D]
// scores, class weights and ignore_index.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> LossCases() {
  return {
      {"SCE_mean", "SoftmaxCrossEntropyLoss", {}, {F({64, 64}, -4, 4), I({64}, 0, 64)}, {F({})}},
      {"SCE_mean_3d_log_prob",
       "SoftmaxCrossEntropyLoss",
       {},
       {F({4, 10, 16}, -4, 4), I({4, 16}, 0, 10)},
       {F({}), F({4, 10, 16})}},
      {"SCE_sum_weights",
       "SoftmaxCrossEntropyLoss",
       {Str("reduction", "sum")},
       {F({8, 5}), I({8}, 0, 5), F({5}, 0, 2)},
       {F({})}},
      {"SCE_none_ignore",
       "SoftmaxCrossEntropyLoss",
       {Str("reduction", "none"), Int("ignore_index", 2)},
       {F({9, 4}), I({9}, 0, 4)},
       {F({9})}},
      {"SCE_mean_weights_ignore",
       "SoftmaxCrossEntropyLoss",
       {Int("ignore_index", 0)},
       {F({12, 6}), I({12}, 0, 6), F({6}, 0.5, 2)},
       {F({})}},
      {"SCEGrad_mean",
       "piper.SoftmaxCrossEntropyLossGrad",
       {},
       {F({}), F({4, 10, 16}, -4, 4), I({4, 16}, 0, 10)},
       {F({4, 10, 16})}},
      {"SCEGrad_none_weights_ignore",
       "piper.SoftmaxCrossEntropyLossGrad",
       {Str("reduction", "none"), Int("ignore_index", 1)},
       {F({9}), F({9, 4}), I({9}, 0, 4), F({4}, 0.5, 2)},
       {F({9, 4})}},
      {"SCEGrad_sum",
       "piper.SoftmaxCrossEntropyLossGrad",
       {Str("reduction", "sum")},
       {F({}), F({6, 3}), I({6}, 0, 3)},
       {F({6, 3})}},
  };
}

}  // namespace piper::engine::testing
