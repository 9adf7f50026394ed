// bfloat16 attention as cuDNN's fused flash attention takes it (engine/cuda/cudnn_attention.h):
// no mask, a causal bool mask that fills with −inf, an additive mask per batch index, keys
// unlike queries in number, without statistics, and the gradient from Y. Where cuDNN is missing
// these run on the cuBLASLt kernels and must agree all the same. Tolerances as the bf16
// attention cases' (bfloat16_cases.cc).
#include <limits>

#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> FlashAttentionCases() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> causal;
  for (int i = 0; i < 48; ++i) {
    for (int j = 0; j < 48; ++j) causal.push_back(j <= i ? 1 : 0);
  }
  const TensorSpec causal_mask = Values({1, 1, 48, 48}, plan::BOOL, causal);
  const TensorSpec causal_mask_3d = Values({1, 48, 48}, plan::BOOL, causal);
  const std::vector<plan::Attribute> causal_fill = {Float("scale", 0.125), Float("fill", -inf),
                                                    Int("fill_if", 0)};
  return {
      {"FusedAttention_flash",
       "piper.FusedAttention",
       {Float("scale", 0.125)},
       {BF({2, 4, 64, 64}), BF({2, 4, 64, 64}), BF({2, 4, 64, 64})},
       {BF({2, 4, 64, 64}), F({2, 4, 64}), F({2, 4, 64})},
       1e-2,
       1e-2},
      {"FusedAttention_flash_causal",
       "piper.FusedAttention",
       causal_fill,
       {BF({2, 2, 48, 32}), BF({2, 2, 32, 48}), BF({2, 2, 48, 32}), causal_mask},
       {BF({2, 2, 48, 32}), F({2, 2, 48}), F({2, 2, 48})},
       1e-2,
       1e-2},
      {"FusedAttention_flash_cross_additive_mask",
       "piper.FusedAttention",
       {Float("scale", 0.25)},
       {BF({2, 3, 24, 16}), BF({2, 3, 16, 40}), BF({2, 3, 40, 16}), BF({2, 1, 24, 40}, -2, 0)},
       {BF({2, 3, 24, 16}), F({2, 3, 24}), F({2, 3, 24})},
       1e-2,
       1e-2},
      {"FusedAttention_flash_no_statistics",
       "piper.FusedAttention",
       causal_fill,
       {BF({3, 48, 64}), BF({3, 64, 48}), BF({3, 48, 64}), causal_mask_3d},
       {BF({3, 48, 64})},
       1e-2,
       1e-2},
      {"FusedAttentionGrad_flash",
       "piper.FusedAttentionGrad",
       {Float("scale", 0.125)},
       {BF({2, 4, 64, 64}), BF({2, 4, 64, 64}), BF({2, 4, 64, 64}), BF({2, 4, 64, 64}), Omitted(),
        F({2, 4, 64}, 0, 1), F({2, 4, 64}, 0.05, 0.2), BF({2, 4, 64, 64})},
       {BF({2, 4, 64, 64}), BF({2, 4, 64, 64}), BF({2, 4, 64, 64})},
       2e-2,
       1e-2},
      {"FusedAttentionGrad_flash_causal_no_dV",
       "piper.FusedAttentionGrad",
       causal_fill,
       {BF({2, 2, 48, 32}), BF({2, 2, 48, 32}), BF({2, 2, 32, 48}), BF({2, 2, 48, 32}), causal_mask,
        F({2, 2, 48}, 0, 1), F({2, 2, 48}, 0.05, 0.2), BF({2, 2, 48, 32})},
       {BF({2, 2, 48, 32}), BF({2, 2, 32, 48}), Omitted()},
       2e-2,
       1e-2},
      {"FusedAttentionGrad_flash_cross_additive_mask",
       "piper.FusedAttentionGrad",
       {Float("scale", 0.25)},
       {BF({2, 3, 24, 16}), BF({2, 3, 24, 16}), BF({2, 3, 16, 40}), BF({2, 3, 40, 16}),
        BF({2, 1, 24, 40}, -2, 0), F({2, 3, 24}, 0, 1), F({2, 3, 24}, 0.05, 0.2),
        BF({2, 3, 24, 16})},
       {BF({2, 3, 24, 16}), BF({2, 3, 16, 40}), BF({2, 3, 40, 16})},
       2e-2,
       1e-2},
      // Float32 with Y: cuBLASLt's kernels take Y and compute as without it.
      {"FusedAttentionGrad_float32_with_Y",
       "piper.FusedAttentionGrad",
       causal_fill,
       {F({2, 2, 48, 32}), F({2, 2, 48, 32}), F({2, 2, 32, 48}), F({2, 2, 48, 32}), causal_mask,
        F({2, 2, 48}, 0, 1), F({2, 2, 48}, 0.05, 0.2), F({2, 2, 48, 32})},
       {F({2, 2, 48, 32}), F({2, 2, 32, 48}), F({2, 2, 48, 32})},
       1e-4,
       1e-4},
  };
}

}  // namespace piper::engine::testing
