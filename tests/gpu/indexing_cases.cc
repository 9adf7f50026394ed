// Gathers: embedding lookups (axis 0), inner axes, negative indices, 8-byte data, and the
// scatter-add with repeated indices.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> IndexingCases() {
  return {
      {"Gather_embedding", "Gather", {}, {F({64, 32}), I({4, 16}, 0, 64)}, {F({4, 16, 32})}},
      {"Gather_axis1_negative",
       "Gather",
       {Int("axis", 1)},
       {F({3, 5, 2}), I({4}, -5, 5)},
       {F({3, 4, 2})}},
      {"Gather_int64", "Gather", {}, {I({10}, 0, 99), I({3}, 0, 10)}, {I({3}, 0, 1)}},
      {"GatherGrad_repeats",
       "piper.GatherGrad",
       {},
       {F({4, 16, 32}), I({4, 16}, 0, 8)},
       {F({8, 32})}},
      {"GatherGrad_axis1",
       "piper.GatherGrad",
       {Int("axis", 1)},
       {F({2, 6, 3}), I({6}, -4, 4)},
       {F({2, 4, 3})}},
  };
}

}  // namespace piper::engine::testing
