// CumSum along inner and outer axes (a negative one too), exclusive and reversed, both dtypes.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> ScanCases() {
  const auto axis = [](double value) { return Values({}, plan::INT64, {value}); };
  return {
      {"CumSum", "CumSum", {}, {F({5, 4}), axis(1)}, {F({5, 4})}},
      {"CumSum_outer_reverse",
       "CumSum",
       {Int("reverse", 1)},
       {F({7, 3, 2}), axis(0)},
       {F({7, 3, 2})}},
      {"CumSum_exclusive_int64",
       "CumSum",
       {Int("exclusive", 1)},
       {I({3, 6}, -9, 9), axis(-1)},
       {I({3, 6}, 0, 1)}},
      {"CumSum_long",
       "CumSum",
       {Int("exclusive", 1), Int("reverse", 1)},
       {F({2, 3000}), axis(1)},
       {F({2, 3000})}},
  };
}

}  // namespace piper::engine::testing
