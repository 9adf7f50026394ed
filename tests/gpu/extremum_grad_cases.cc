// The gradients of Max, Min and ReduceMax, with ties (dY shared among them) and broadcast
// inputs.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> ExtremumGradCases() {
  const auto floats = [](Shape shape, std::vector<double> values) {
    return Values(std::move(shape), plan::FLOAT32, std::move(values));
  };
  return {
      {"MaxMinGrad_ties",
       "piper.MaxMinGrad",
       {Int("input", 1)},
       {F({2, 3}), floats({2, 3}, {3, 2, 5, 1, 4, 4}), floats({2, 3}, {3, 1, 5, 0, 4, 2}),
        floats({3}, {3, 2, 5}), floats({2, 1}, {1, 4})},
       {F({2, 3})}},
      {"MaxMinGrad_first",
       "piper.MaxMinGrad",
       {Int("input", 0)},
       {F({4}), floats({4}, {1, 2, 2, 0}), floats({4}, {1, 2, 2, 0}), floats({4}, {0, 2, 1, 0})},
       {F({4})}},
      {"ReduceMaxGrad_ties",
       "piper.ReduceMaxGrad",
       {Ints("axes", {1})},
       {F({2, 1, 2}), floats({2, 3, 2}, {1, 5, 3, 5, 3, 0, 2, 2, 2, 2, 1, 2}),
        floats({2, 1, 2}, {3, 5, 2, 2})},
       {F({2, 3, 2})}},
      {"ReduceMaxGrad_all",
       "piper.ReduceMaxGrad",
       {},
       {F({6}), floats({6}, {1, 2, 3, 4, 5, 6}), floats({6}, {1, 2, 3, 4, 5, 6})},
       {F({6})}},
  };
}

}  // namespace piper::engine::testing
