// The planner's fused ops: BiasGelu both ways with and without a bias, and attention with
// no mask, a causal bool mask that fills, an additive float mask broadcast over heads, and
// more batch indices than one chunk holds (the last chunk shorter).
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> FusedCases() {
  std::vector<double> causal;
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) causal.push_back(j <= i ? 1 : 0);
  }
  const TensorSpec causal_mask = Values({1, 1, 16, 16}, plan::BOOL, causal);
  const std::vector<plan::Attribute> causal_fill = {Float("scale", 0.25), Float("fill", -1e9),
                                                    Int("fill_if", 0)};
  return {
      {"BiasGelu", "piper.BiasGelu", {}, {F({4, 16, 128}, -4, 4), F({128})}, {F({4, 16, 128})}},
      {"BiasGelu_tanh_no_bias",
       "piper.BiasGelu",
       {Str("approximate", "tanh")},
       {F({33}, -4, 4)},
       {F({33})}},
      {"BiasGeluGrad",
       "piper.BiasGeluGrad",
       {},
       {F({64, 128}), F({64, 128}, -4, 4), F({128})},
       {F({64, 128}), F({128})},
       1e-5,
       1e-5},
      {"BiasGeluGrad_bias_only",
       "piper.BiasGeluGrad",
       {Str("approximate", "tanh")},
       {F({3000, 8}), F({3000, 8}, -4, 4), F({8})},
       {Omitted(), F({8})},
       1e-5,
       1e-4},
      {"FusedAttention",
       "piper.FusedAttention",
       {Float("scale", 0.25)},
       {F({4, 2, 16, 16}), F({4, 2, 16, 16}), F({4, 2, 16, 16})},
       {F({4, 2, 16, 16}), F({4, 2, 16}), F({4, 2, 16})},
       1e-5,
       1e-5},
      {"FusedAttention_causal",
       "piper.FusedAttention",
       causal_fill,
       {F({2, 2, 16, 8}), F({2, 2, 8, 16}), F({2, 2, 16, 8}), causal_mask},
       {F({2, 2, 16, 8}), F({2, 2, 16}), F({2, 2, 16})},
       1e-5,
       1e-5},
      {"FusedAttention_additive_mask",
       "piper.FusedAttention",
       {},
       {F({2, 3, 5, 4}), F({2, 3, 4, 7}), F({2, 3, 7, 6}), F({2, 1, 5, 7}, -2, 0)},
       {F({2, 3, 5, 6})},
       1e-5,
       1e-5},
      {"FusedAttention_chunks",
       "piper.FusedAttention",
       {Float("scale", 0.1)},
       {F({5, 2048, 4}), F({5, 4, 2048}), F({5, 2048, 2})},
       {F({5, 2048, 2})},
       1e-5,
       1e-5},
      {"FusedAttentionGrad_causal",
       "piper.FusedAttentionGrad",
       causal_fill,
       {F({2, 2, 16, 8}), F({2, 2, 16, 8}), F({2, 2, 8, 16}), F({2, 2, 16, 8}), causal_mask,
        F({2, 2, 16}, 0, 1), F({2, 2, 16}, 0.05, 0.2)},
       {F({2, 2, 16, 8}), F({2, 2, 8, 16}), F({2, 2, 16, 8})},
       1e-4,
       1e-4},
      {"FusedAttentionGrad_dV_only",
       "piper.FusedAttentionGrad",
       {Float("scale", 0.5)},
       {F({3, 6, 4}), F({3, 6, 4}), F({3, 4, 6}), F({3, 6, 4}), Omitted(), F({3, 6}, 0, 1),
        F({3, 6}, 0.1, 0.3)},
       {Omitted(), Omitted(), F({3, 6, 4})},
       1e-4,
       1e-4},
  };
}

}  // namespace piper::engine::testing
