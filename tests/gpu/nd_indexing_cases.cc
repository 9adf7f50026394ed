// GatherND (slices, single elements, batch_dims), its gradient piper.GatherNDGrad and
// ScatterND (none with distinct tuples, whose result is defined; add and mul with repeated
// ones), negative indices, 8-, 4- and 1-byte data; NonZero, whose indices and count the CUDA
// kernel computes on the host.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> NdIndexingCases() {
  return {
      {"GatherND_slices", "GatherND", {}, {F({4, 3, 5}), I({2, 3, 2}, -3, 3)}, {F({2, 3, 5})}},
      {"GatherND_elements_int64",
       "GatherND",
       {},
       {I({3, 4}, -50, 50), I({6, 2}, 0, 3)},
       {I({6}, 0, 1)}},
      {"GatherND_batch_dims",
       "GatherND",
       {Int("batch_dims", 1)},
       {F({2, 3, 4}), I({2, 5, 1}, -3, 3)},
       {F({2, 5, 4})}},
      {"GatherNDGrad_repeats",
       "piper.GatherNDGrad",
       {},
       {F({2, 3, 5}), I({2, 3, 2}, 0, 3)},
       {F({4, 3, 5})}},
      {"GatherNDGrad_batch_dims",
       "piper.GatherNDGrad",
       {Int("batch_dims", 1)},
       {F({2, 5, 4}), I({2, 5, 1}, 0, 3)},
       {F({2, 3, 4})}},
      {"ScatterND_rows",
       "ScatterND",
       {},
       {F({4, 3}), Values({2, 1}, plan::INT64, {3, -3}), F({2, 3})},
       {F({4, 3})}},
      {"ScatterND_int64_elements",
       "ScatterND",
       {},
       {I({2, 6}, 0, 100), Values({2, 2}, plan::INT64, {0, 0, 1, 0}), I({2}, -100, 0)},
       {I({2, 6}, 0, 1)}},
      {"ScatterND_bool",
       "ScatterND",
       {},
       {B({5}), Values({2, 1}, plan::INT64, {4, 1}), B({2})},
       {B({5})}},
      {"ScatterND_add_repeats",
       "ScatterND",
       {Str("reduction", "add")},
       {F({5, 4}), I({6, 2}, -4, 4), F({6})},
       {F({5, 4})}},
      {"NonZero_bool_bound", "NonZero", {}, {B({3, 4})}, {I({2, 12}, 0, 1), I({}, 0, 1)}},
      {"NonZero_float",
       "NonZero",
       {},
       {Values({5}, plan::FLOAT32, {0, 1.5, 0, -2, 0})},
       {I({1, 5}, 0, 1)}},
      {"ScatterND_mul_slices",
       "ScatterND",
       {Str("reduction", "mul")},
       {F({3, 4}), I({4, 1}, 0, 3), F({4, 4})},
       {F({3, 4})}},
  };
}

}  // namespace piper::engine::testing
