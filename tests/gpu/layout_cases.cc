// Layout ops: copies, permutations of 8-, 4- and 1-byte elements, broadcast, Tile, Concat and
// Split along inner and outer axes, and the data-parallel Accumulate and Shard.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> LayoutCases() {
  return {
      {"Reshape", "Reshape", {}, {F({4, 6}), Values({2}, plan::INT64, {3, 8})}, {F({3, 8})}},
      {"Flatten", "Flatten", {}, {I({2, 3, 4}, 0, 9)}, {I({2, 12}, 0, 1)}},
      {"Identity", "Identity", {}, {B({5})}, {B({5})}},
      {"Squeeze", "Squeeze", {}, {F({3, 1, 2})}, {F({3, 2})}},
      {"Unsqueeze", "Unsqueeze", {}, {F({3, 2})}, {F({3, 1, 2})}},
      {"Transpose_heads",
       "Transpose",
       {Ints("perm", {0, 2, 1, 3})},
       {F({4, 16, 2, 16})},
       {F({4, 2, 16, 16})}},
      {"Transpose_default", "Transpose", {}, {I({2, 3, 5}, 0, 99)}, {I({5, 3, 2}, 0, 1)}},
      {"Transpose_bool", "Transpose", {Ints("perm", {1, 0})}, {B({3, 7})}, {B({7, 3})}},
      {"Expand", "Expand", {}, {F({3, 1}), Values({3}, plan::INT64, {2, 3, 4})}, {F({2, 3, 4})}},
      {"Tile", "Tile", {}, {F({2, 3}), Values({2}, plan::INT64, {3, 2})}, {F({6, 6})}},
      {"Tile_int64_unit_repeat",
       "Tile",
       {},
       {I({2, 1, 3}, 0, 99), Values({3}, plan::INT64, {1, 4, 2})},
       {I({2, 4, 6}, 0, 1)}},
      {"Concat_inner", "Concat", {Int("axis", -1)}, {F({2, 3, 1}), F({2, 3, 4})}, {F({2, 3, 5})}},
      {"Concat_outer_int64",
       "Concat",
       {Int("axis", 0)},
       {I({1, 3}, 0, 9), I({2, 3}, 0, 9)},
       {I({3, 3}, 0, 1)}},
      {"Split",
       "Split",
       {Int("axis", 1)},
       {F({3, 7, 2}), Values({2}, plan::INT64, {3, 4})},
       {F({3, 3, 2}), F({3, 4, 2})}},
      {"Accumulate", "piper.Accumulate", {}, {F({4, 5})}, {F({20})}},
      {"Shard_padded",
       "piper.Shard",
       {Int("num_shards", 3), Int("shard_index", 2)},
       {F({10})},
       {F({4})}},
      {"Shard_middle",
       "piper.Shard",
       {Int("num_shards", 2), Int("shard_index", 1)},
       {I({8}, 0, 9)},
       {I({4}, 0, 1)}},
  };
}

}  // namespace piper::engine::testing
