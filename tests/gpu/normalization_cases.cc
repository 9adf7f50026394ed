// Normalizations: rows along the last and an inner axis, long rows (more elements than
// threads), LayerNorm without bias or statistics, and gradients with every output.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> NormalizationCases() {
  return {
      {"Softmax_last", "Softmax", {}, {F({4, 2, 16, 16}, -5, 5)}, {F({4, 2, 16, 16})}},
      {"Softmax_axis1", "Softmax", {Int("axis", 1)}, {F({3, 5, 4}, -5, 5)}, {F({3, 5, 4})}},
      {"Softmax_long_rows", "Softmax", {}, {F({3, 3000}, -20, 20)}, {F({3, 3000})}},
      {"LogSoftmax", "LogSoftmax", {}, {F({7, 33}, -5, 5)}, {F({7, 33})}},
      {"LogSoftmax_axis0", "LogSoftmax", {Int("axis", 0)}, {F({6, 5}, -5, 5)}, {F({6, 5})}},
      {"SoftmaxGrad", "piper.SoftmaxGrad", {}, {F({8, 16}), F({8, 16}, 0, 1)}, {F({8, 16})}},
      {"LogSoftmaxGrad_axis1",
       "piper.LogSoftmaxGrad",
       {Int("axis", 1)},
       {F({2, 7, 3}), F({2, 7, 3}, -4, 0)},
       {F({2, 7, 3})}},
      {"LayerNorm",
       "LayerNormalization",
       {Float("epsilon", 1e-5)},
       {F({4, 16, 32}, -3, 3), F({32}), F({32})},
       {F({4, 16, 32}), F({4, 16, 1}), F({4, 16, 1})},
       1e-5,
       1e-5},
      {"LayerNorm_axis1_no_bias",
       "LayerNormalization",
       {Int("axis", 1)},
       {F({3, 4, 5}), F({4, 5})},
       {F({3, 4, 5}), Omitted(), Omitted()},
       1e-5,
       1e-5},
      {"LayerNorm_wide",
       "LayerNormalization",
       {},
       {F({5, 1500}), F({1500}), F({1500})},
       {F({5, 1500})},
       1e-5,
       1e-5},
      {"LayerNormGrad",
       "piper.LayerNormalizationGrad",
       {},
       {F({64, 32}), F({64, 32}), F({32}), F({64, 1}), F({64, 1}, 0.5, 2)},
       {F({64, 32}), F({32}), F({32})},
       1e-5,
       1e-5},
      {"LayerNormGrad_many_rows",
       "piper.LayerNormalizationGrad",
       {},
       {F({5000, 8}), F({5000, 8}), F({8}), F({5000, 1}), F({5000, 1}, 0.5, 2)},
       {Omitted(), F({8}), F({8})},
       1e-5,
       1e-4},
  };
}

}  // namespace piper::engine::testing
