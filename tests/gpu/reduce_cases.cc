// Reductions: inner, outer and middle axes, everything, few outputs over many inputs
// (chunked partial sums), keepdims, axes as attribute and as input, BroadcastTo.
#include <limits>

#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> ReduceCases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {
      {"ReduceSum_last",
       "ReduceSum",
       {},
       {F({6, 5, 7}), Values({1}, plan::INT64, {-1})},
       {F({6, 5, 1})}},
      {"ReduceSum_all_no_keepdims", "ReduceSum", {Int("keepdims", 0)}, {F({300, 70})}, {F({})}},
      {"ReduceSum_middle",
       "ReduceSum",
       {Int("keepdims", 0)},
       {F({4, 9, 3}), Values({1}, plan::INT64, {1})},
       {F({4, 3})}},
      {"ReduceSum_noop",
       "ReduceSum",
       {Int("noop_with_empty_axes", 1)},
       {F({4, 3}), Values({0}, plan::INT64, {})},
       {F({4, 3})}},
      {"ReduceMean_axes_attribute",
       "ReduceMean",
       {Ints("axes", {0, 2})},
       {F({5, 4, 6})},
       {F({1, 4, 1})}},
      {"ReduceMax_nan",
       "ReduceMax",
       {Ints("axes", {1})},
       {Values({2, 3}, plan::FLOAT32, {1, nan, 2, -1, -2, -3})},
       {F({2, 1})}},
      {"ReduceMax_input_axes",
       "ReduceMax",
       {Int("keepdims", 0)},
       {F({3, 40, 2}), Values({1}, plan::INT64, {1})},
       {F({3, 2})}},
      {"SumTo_bias_gradient", "piper.SumTo", {}, {F({4096, 33})}, {F({33})}},
      {"SumTo_inner", "piper.SumTo", {}, {F({3, 5, 8})}, {F({3, 1, 1})}},
      {"SumTo_scalar", "piper.SumTo", {}, {F({10, 10})}, {F({})}},
      {"BroadcastTo",
       "piper.BroadcastTo",
       {Ints("axes", {1}), Float("scale", 0.25)},
       {F({3, 4})},
       {F({3, 5, 4})}},
  };
}

}  // namespace piper::engine::testing
