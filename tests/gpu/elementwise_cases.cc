// Elementwise ops: broadcasting, both dtypes where the op takes them, edge values
// (zeros for Relu's kink, NaN propagation through Max and Min).
#include <limits>

#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> ElementwiseCases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<OpCase> cases = {
      {"Add_broadcast", "Add", {}, {F({4, 1, 5}), F({3, 1})}, {F({4, 3, 5})}},
      {"Add_int64", "Add", {}, {I({2, 3}, -9, 9), I({3}, -9, 9)}, {I({2, 3}, 0, 1)}},
      {"Sub_scalar", "Sub", {}, {F({}), F({6, 7})}, {F({6, 7})}},
      {"Sub_int64", "Sub", {}, {I({5}, -9, 9), I({5}, -9, 9)}, {I({5}, 0, 1)}},
      {"Mul_large", "Mul", {}, {F({1000, 37}), F({1000, 37})}, {F({1000, 37})}},
      {"Mul_int64", "Mul", {}, {I({2, 1, 4}, -9, 9), I({3, 1}, -9, 9)}, {I({2, 3, 4}, 0, 1)}},
      {"Div", "Div", {}, {F({3, 4}), F({4}, 0.5, 2.0)}, {F({3, 4})}},
      {"Sum_three", "Sum", {}, {F({2, 3}), F({3}), F({2, 1})}, {F({2, 3})}},
      {"Sum_one", "Sum", {}, {F({5})}, {F({5})}},
      {"Max_nan",
       "Max",
       {},
       {F({2, 4}), Values({4}, plan::FLOAT32, {0.5, nan, -0.5, 2})},
       {F({2, 4})}},
      {"Min_int64",
       "Min",
       {},
       {I({3, 2}, -9, 9), I({2}, -9, 9), I({3, 1}, -9, 9)},
       {I({3, 2}, 0, 1)}},
      {"Neg", "Neg", {}, {F({7, 3})}, {F({7, 3})}},
      {"Neg_int64", "Neg", {}, {I({9}, -9, 9)}, {I({9}, 0, 1)}},
      {"Relu", "Relu", {}, {Values({6}, plan::FLOAT32, {-1, 0, 2, -0.0, 3, nan})}, {F({6})}},
      {"Tanh", "Tanh", {}, {F({100}, -5, 5)}, {F({100})}},
      {"Sigmoid", "Sigmoid", {}, {F({100}, -30, 30)}, {F({100})}},
      {"Sqrt", "Sqrt", {}, {F({64}, 0, 9)}, {F({64})}},
      {"Reciprocal", "Reciprocal", {}, {F({64}, 0.1, 3)}, {F({64})}},
      {"Exp", "Exp", {}, {F({64}, -10, 10)}, {F({64})}},
      {"Log", "Log", {}, {F({64}, 0.01, 100)}, {F({64})}},
      {"Erf", "Erf", {}, {F({257}, -4, 4)}, {F({257})}},
      {"Not", "Not", {}, {B({11})}, {B({11})}},
      {"ReluGrad", "piper.ReluGrad", {}, {F({50}), F({50}, -1, 1)}, {F({50})}},
      {"TanhGrad", "piper.TanhGrad", {}, {F({50}), F({50})}, {F({50})}},
      {"SigmoidGrad", "piper.SigmoidGrad", {}, {F({50}), F({50}, 0, 1)}, {F({50})}},
      {"SqrtGrad", "piper.SqrtGrad", {}, {F({50}), F({50}, 0.5, 3)}, {F({50})}},
      {"ReciprocalGrad", "piper.ReciprocalGrad", {}, {F({50}), F({50})}, {F({50})}},
      {"ErfGrad", "piper.ErfGrad", {}, {F({50}), F({50}, -3, 3)}, {F({50})}},
      {"Equal_int64", "Equal", {}, {I({4, 5}, 0, 3), I({5}, 0, 3)}, {B({4, 5})}},
      {"Equal_bool", "Equal", {}, {B({6}), B({6})}, {B({6})}},
      {"Less", "Less", {}, {F({3, 4}), F({3, 1})}, {B({3, 4})}},
      {"Greater_int64", "Greater", {}, {I({8}, 0, 4), I({}, 0, 4)}, {B({8})}},
      {"Where_broadcast", "Where", {}, {B({4, 1}), F({4, 6}), F({6})}, {F({4, 6})}},
      {"Where_int64", "Where", {}, {B({5}), I({5}, 0, 9), I({}, 0, 9)}, {I({5}, 0, 1)}},
      {"Cast_float_to_int64",
       "Cast",
       {Int("to", 7)},
       {Values({6}, plan::FLOAT32, {-2.7, -0.5, 0, 0.5, 3.9, nan})},
       {I({6}, 0, 1)}},
      {"Cast_int64_to_float", "Cast", {Int("to", 1)}, {I({6}, -99, 99)}, {F({6})}},
      {"Cast_float_to_bool",
       "Cast",
       {Int("to", 9)},
       {Values({4}, plan::FLOAT32, {0, -0.0, 2, nan})},
       {B({4})}},
      {"Cast_bool_to_float", "Cast", {Int("to", 1)}, {B({9})}, {F({9})}},
      {"Cast_same", "Cast", {Int("to", 1)}, {F({9})}, {F({9})}},
  };
  return cases;
}

}  // namespace piper::engine::testing
