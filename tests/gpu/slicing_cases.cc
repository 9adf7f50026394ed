// Slice and its gradient: default axes and steps, negative axes, starts, ends and steps (out
// of range ones clamp), 8-, 4- and 1-byte elements, an empty slice; Trilu, both triangles.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {
namespace {

TensorSpec Int64s(std::vector<double> values) {
  const auto n = static_cast<int64_t>(values.size());
  return Values({n}, plan::INT64, std::move(values));
}

}  // namespace

std::vector<OpCase> SlicingCases() {
  return {
      {"Slice_steps",
       "Slice",
       {},
       {F({6, 8}), Int64s({1, 0}), Int64s({5, 8}), Int64s({0, 1}), Int64s({2, 3})},
       {F({2, 3})}},
      {"Slice_defaults",
       "Slice",
       {},
       {F({4, 6, 5}), Int64s({1, 2}), Int64s({3, 100})},
       {F({2, 4, 5})}},
      {"Slice_reversed_int64",
       "Slice",
       {},
       {I({5, 7}, -9, 9), Int64s({-1, 6}), Int64s({-100, 0}), Int64s({-1, 0}), Int64s({-2, -1})},
       {I({4, 4}, 0, 1)}},
      {"Slice_bool", "Slice", {}, {B({3, 9}), Int64s({2}), Int64s({8}), Int64s({1})}, {B({3, 6})}},
      {"Slice_empty", "Slice", {}, {F({4, 3}), Int64s({3}), Int64s({1}), Int64s({0})}, {F({0, 3})}},
      {"SliceGrad",
       "piper.SliceGrad",
       {},
       {F({2, 3}), Int64s({1, 0}), Int64s({5, 8}), Int64s({0, 1}), Int64s({2, 3})},
       {F({6, 8})}},
      {"SliceGrad_reversed",
       "piper.SliceGrad",
       {},
       {F({3, 4, 2}), Int64s({-1}), Int64s({-5}), Int64s({1}), Int64s({-1})},
       {F({3, 6, 2})}},
      {"Trilu_upper", "Trilu", {}, {F({2, 5, 7})}, {F({2, 5, 7})}},
      {"Trilu_lower_k_int64",
       "Trilu",
       {Int("upper", 0)},
       {I({6, 4}, -9, 9), Values({}, plan::INT64, {-2})},
       {I({6, 4}, 0, 1)}},
      {"Trilu_bool_k", "Trilu", {}, {B({3, 4, 4}), Values({}, plan::INT64, {1})}, {B({3, 4, 4})}},
  };
}

}  // namespace piper::engine::testing
