// Ops the CUDA backend runs through the CPU kernel on host copies of their tensors: the
// staging must give the CPU kernel's results, constant inputs included.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> HostFallbackCases() {
  return {
      {"Pow", "Pow", {}, {F({3, 4}, 0.1, 2), F({4}, -2, 2)}, {F({3, 4})}},
      {"Slice",
       "Slice",
       {},
       {F({6, 8}), Values({2}, plan::INT64, {1, 0}), Values({2}, plan::INT64, {5, 8}),
        Values({2}, plan::INT64, {0, 1}), Values({2}, plan::INT64, {2, 3})},
       {F({2, 3})}},
      {"Einsum",
       "Einsum",
       {Str("equation", "bij,bjk->bik")},
       {F({2, 3, 4}), F({2, 4, 5})},
       {F({2, 3, 5})},
       1e-5,
       1e-5},
      {"CumSum", "CumSum", {}, {F({5, 4}), Values({}, plan::INT64, {1})}, {F({5, 4})}},
  };
}

}  // namespace piper::engine::testing
