// GatherElements, its gradient and ScatterElements: inner and outer axes, indices smaller than
// the data off the axis, negative indices, repeated indices (the gradient and reduction add
// sum them; reduction none gets distinct ones, whose result is defined), 8-, 4- and 1-byte
// data.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> GatherElementsCases() {
  return {
      {"GatherElements_inner",
       "GatherElements",
       {Int("axis", -1)},
       {F({4, 6}), I({4, 3}, -6, 6)},
       {F({4, 3})}},
      {"GatherElements_outer_int64",
       "GatherElements",
       {Int("axis", 0)},
       {I({5, 3, 2}, -9, 9), I({7, 2, 2}, 0, 5)},
       {I({7, 2, 2}, 0, 1)}},
      {"GatherElementsGrad_repeats",
       "piper.GatherElementsGrad",
       {Int("axis", 1)},
       {F({3, 8}), I({3, 8}, -2, 3)},
       {F({3, 4})}},
      {"ScatterElements_outer_distinct",
       "ScatterElements",
       {Int("axis", 0)},
       {F({3, 4}), Values({2, 4}, plan::INT64, {0, 2, 1, 0, 2, -2, 0, 1}), F({2, 4})},
       {F({3, 4})}},
      {"ScatterElements_add_repeats",
       "ScatterElements",
       {Int("axis", -1), Str("reduction", "add")},
       {F({3, 5}), I({3, 6}, -5, 5), F({3, 6})},
       {F({3, 5})}},
      {"ScatterElements_mul_int64",
       "ScatterElements",
       {Int("axis", 1), Str("reduction", "mul")},
       {I({2, 4}, -3, 4), I({2, 3}, 0, 4), I({2, 3}, -2, 3)},
       {I({2, 4}, 0, 1)}},
      {"ScatterElements_bool",
       "ScatterElements",
       {Int("axis", 1)},
       {B({2, 3}), Values({2, 2}, plan::INT64, {2, 0, 1, -1}), B({2, 2})},
       {B({2, 3})}},
  };
}

}  // namespace piper::engine::testing
