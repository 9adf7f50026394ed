// GatherElements and its gradient: inner and outer axes, indices smaller than the data off
// the axis, negative indices, repeated indices (the gradient adds them), 8- and 4-byte data.
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
  };
}

}  // namespace piper::engine::testing
