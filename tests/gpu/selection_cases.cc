// ArgMax, ArgMin, TopK, OneHot and Hardmax: inner and outer axes, ties (first or last index), NaN,
// both dtypes, out-of-range and negative one-hot indices.
#include <limits>

#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> SelectionCases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto k = [](double value) { return Values({1}, plan::INT64, {value}); };
  return {
      {"ArgMax_inner", "ArgMax", {Int("axis", -1)}, {F({6, 17})}, {I({6, 1}, 0, 1)}},
      {"Hardmax_default_axis", "Hardmax", {}, {F({6, 17})}, {F({6, 17})}},
      {"Hardmax_outer_ties_nan",
       "Hardmax",
       {Int("axis", 0)},
       {Values({3, 2}, plan::FLOAT32, {1, 0, 1, nan, 0, 2})},
       {F({3, 2})}},
      {"ArgMax_ties_last",
       "ArgMax",
       {Int("axis", 0), Int("keepdims", 0), Int("select_last_index", 1)},
       {I({5, 3}, 0, 3)},
       {I({3}, 0, 1)}},
      {"ArgMin_nan",
       "ArgMin",
       {Int("axis", 1)},
       {Values({2, 4}, plan::FLOAT32, {3, nan, 1, 1, 2, 0, 0, 5})},
       {I({2, 1}, 0, 1)}},
      {"TopK_largest", "TopK", {}, {F({4, 32}), k(5)}, {F({4, 5}), I({4, 5}, 0, 1)}},
      {"TopK_smallest_ties",
       "TopK",
       {Int("axis", 0), Int("largest", 0)},
       {I({9, 3}, 0, 4), k(4)},
       {I({4, 3}, 0, 1), I({4, 3}, 0, 1)}},
      {"TopK_nan",
       "TopK",
       {},
       {Values({6}, plan::FLOAT32, {1, nan, 3, 3, nan, -1}), k(4)},
       {F({4}), I({4}, 0, 1)}},
      {"OneHot_last",
       "OneHot",
       {},
       {Values({2, 3}, plan::INT64, {0, 4, -1, 7, -6, 2}), Values({}, plan::INT64, {5}),
        Values({2}, plan::FLOAT32, {0, 1})},
       {F({2, 3, 5})}},
      {"OneHot_axis0_int64",
       "OneHot",
       {Int("axis", 0)},
       {Values({3}, plan::FLOAT32, {2, 0, 1.5}), Values({}, plan::INT64, {3}),
        Values({2}, plan::INT64, {-1, 9})},
       {I({3, 3}, 0, 1)}},
  };
}

}  // namespace piper::engine::testing
