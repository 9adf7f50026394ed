// Pow and its gradients: every pair of base and exponent dtypes, broadcasting, the squares and
// zero exponents the gradients treat apart, a zero base.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> PowerCases() {
  return {
      {"Pow_broadcast", "Pow", {}, {F({3, 4}, 0.1, 2), F({4}, -2, 2)}, {F({3, 4})}},
      {"Pow_int64_exponent", "Pow", {}, {F({5, 2}), I({2}, -2, 4)}, {F({5, 2})}},
      {"Pow_square", "Pow", {}, {F({33}), Values({}, plan::FLOAT32, {2})}, {F({33})}},
      {"Pow_int64", "Pow", {}, {I({4, 3}, -3, 4), I({3}, -2, 5)}, {I({4, 3}, 0, 1)}},
      {"Pow_int64_float_exponent",
       "Pow",
       {},
       {I({3, 2}, 1, 9), Values({2}, plan::FLOAT32, {1.3, 0.7})},
       {I({3, 2}, 0, 1)}},
      {"PowBaseGrad",
       "piper.PowBaseGrad",
       {},
       {F({3, 4}), F({3, 4}, 0.1, 2), Values({4}, plan::FLOAT32, {0, 2, 1.5, -0.5})},
       {F({3, 4})}},
      {"PowBaseGrad_int64",
       "piper.PowBaseGrad",
       {},
       {F({2, 5}), F({2, 5}), I({5}, -2, 4)},
       {F({2, 5})}},
      {"PowExponentGrad",
       "piper.PowExponentGrad",
       {},
       {F({2, 4}), Values({4}, plan::FLOAT32, {0, 0.5, 1.5, 3}), F({2, 4}, 0, 2)},
       {F({2, 4})}},
  };
}

}  // namespace piper::engine::testing
