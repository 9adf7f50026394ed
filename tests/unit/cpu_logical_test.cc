// CPU comparisons, logic ops, Mod, Not, Cast and CastLike.
#include <gmock/gmock.h>

#include <cmath>
#include <limits>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuLogical, ComparisonsBroadcastFloat) {
  KernelRunner k;
  const int a = k.Input({2, 1}, {1, 2});
  const int b = k.Input({3}, {0, 1, 2});
  const int eq = k.Output({2, 3}, plan::BOOL);
  const int lt = k.Output({2, 3}, plan::BOOL);
  const int gt = k.Output({2, 3}, plan::BOOL);
  k.Run("Equal", {a, b}, {eq});
  k.Run("Less", {a, b}, {lt});
  k.Run("Greater", {a, b}, {gt});
  EXPECT_THAT(k.Bools(eq), ElementsAre(0, 1, 0, 0, 0, 1));
  EXPECT_THAT(k.Bools(lt), ElementsAre(0, 0, 1, 0, 0, 0));
  EXPECT_THAT(k.Bools(gt), ElementsAre(1, 0, 0, 1, 1, 0));
}

// Mod's two signs, numpy's 0 for integer divisors 0 and -1 (C would trap on INT64_MIN % -1).
TEST(CpuLogical, ModSignsAndZeroDivisors) {
  KernelRunner k;
  const int a = k.IntInput({6}, {7, -7, 7, -7, 5, std::numeric_limits<int64_t>::min()});
  const int b = k.IntInput({6}, {3, 3, -3, -3, 0, -1});
  const int floored = k.Output({6}, plan::INT64);
  const int truncated = k.Output({6}, plan::INT64);
  k.Run("Mod", {a, b}, {floored});
  k.Run("Mod", {a, b}, {truncated}, {Int("fmod", 1)});
  EXPECT_THAT(k.Int64s(floored), ElementsAre(1, 2, -2, -1, 0, 0));
  EXPECT_THAT(k.Int64s(truncated), ElementsAre(1, -1, 1, -1, 0, 0));
  const int x = k.Input({3}, {5.5f, -5.5f, 1});
  const int d = k.Input({3}, {2, 2, 0});
  const int fy = k.Output({3});
  k.Run("Mod", {x, d}, {fy});
  const std::vector<float> got = k.Floats(fy);
  EXPECT_FLOAT_EQ(got[0], 1.5f);
  EXPECT_FLOAT_EQ(got[1], 0.5f);
  EXPECT_TRUE(std::isnan(got[2]));
}

TEST(CpuLogical, ComparisonsOfInt64AndBool) {
  KernelRunner k;
  const int a = k.IntInput({3}, {-1, 5, 7});
  const int b = k.IntInput({}, {5});
  const int lt = k.Output({3}, plan::BOOL);
  k.Run("Less", {a, b}, {lt});
  EXPECT_THAT(k.Bools(lt), ElementsAre(1, 0, 0));
  const int p = k.BoolInput({4}, {0, 0, 1, 1});
  const int q = k.BoolInput({4}, {0, 1, 0, 1});
  const int eq = k.Output({4}, plan::BOOL);
  const int not_p = k.Output({4}, plan::BOOL);
  k.Run("Equal", {p, q}, {eq});
  k.Run("Not", {p}, {not_p});
  EXPECT_THAT(k.Bools(eq), ElementsAre(1, 0, 0, 1));
  EXPECT_THAT(k.Bools(not_p), ElementsAre(1, 1, 0, 0));
}

TEST(CpuLogical, NaNComparesUnequal) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  KernelRunner k;
  const int a = k.Input({2}, {nan, 1});
  const int eq = k.Output({2}, plan::BOOL);
  k.Run("Equal", {a, a}, {eq});
  EXPECT_THAT(k.Bools(eq), ElementsAre(0, 1));
}

TEST(CpuLogical, ComparisonRejectsMixedDtypesAndBoolOrder) {
  KernelRunner k;
  const int f = k.Input({2}, {1, 2});
  const int i = k.IntInput({2}, {1, 2});
  const int p = k.BoolInput({2}, {0, 1});
  const int y = k.Output({2}, plan::BOOL);
  EXPECT_THROW(k.Run("Equal", {f, i}, {y}), Error);
  try {
    k.Run("Less", {p, p}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Less: inputs have dtype bool"));
  }
}

TEST(CpuLogical, CastBetweenFloatInt64AndBool) {
  KernelRunner k;
  const int x = k.Input({5}, {-2.7f, -0.0f, 0.5f, 3.9f, std::numeric_limits<float>::quiet_NaN()});
  const int as_int = k.Output({5}, plan::INT64);
  const int as_bool = k.Output({5}, plan::BOOL);
  const int as_float = k.Output({5});
  k.Run("Cast", {x}, {as_int}, {Int("to", 7)});
  k.Run("Cast", {x}, {as_bool}, {Int("to", 9)});
  k.Run("Cast", {x}, {as_float}, {Int("to", 1)});
  const auto ints = k.Int64s(as_int);
  EXPECT_EQ(ints[0], -2);  // truncation toward zero
  EXPECT_EQ(ints[1], 0);
  EXPECT_EQ(ints[2], 0);
  EXPECT_EQ(ints[3], 3);
  EXPECT_EQ(ints[4], std::numeric_limits<int64_t>::min());  // NaN
  EXPECT_THAT(k.Bools(as_bool), ElementsAre(1, 0, 1, 1, 1));
  EXPECT_FLOAT_EQ(k.Floats(as_float)[3], 3.9f);

  const int n = k.IntInput({3}, {-4, 0, 9});
  const int n_float = k.Output({3});
  const int n_bool = k.Output({3}, plan::BOOL);
  k.Run("Cast", {n}, {n_float}, {Int("to", 1)});
  k.Run("Cast", {n}, {n_bool}, {Int("to", 9)});
  EXPECT_THAT(k.Floats(n_float), ElementsAre(-4, 0, 9));
  EXPECT_THAT(k.Bools(n_bool), ElementsAre(1, 0, 1));

  const int b = k.BoolInput({2}, {1, 0});
  const int b_float = k.Output({2});
  const int b_int = k.Output({2}, plan::INT64);
  k.Run("Cast", {b}, {b_float}, {Int("to", 1)});
  k.Run("Cast", {b}, {b_int}, {Int("to", 7)});
  EXPECT_THAT(k.Floats(b_float), ElementsAre(1, 0));
  EXPECT_THAT(k.Int64s(b_int), ElementsAre(1, 0));
}

// The logic ops of bool inputs, broadcasting; LessOrEqual and GreaterOrEqual of int64.
TEST(CpuLogical, LogicOpsAndOrderedComparisons) {
  KernelRunner k;
  const int p = k.BoolInput({2, 2}, {0, 0, 1, 1});
  const int q = k.BoolInput({2}, {0, 1});
  const int both = k.Output({2, 2}, plan::BOOL);
  const int either = k.Output({2, 2}, plan::BOOL);
  const int one = k.Output({2, 2}, plan::BOOL);
  k.Run("And", {p, q}, {both});
  k.Run("Or", {p, q}, {either});
  k.Run("Xor", {p, q}, {one});
  EXPECT_THAT(k.Bools(both), ElementsAre(0, 0, 0, 1));
  EXPECT_THAT(k.Bools(either), ElementsAre(0, 1, 1, 1));
  EXPECT_THAT(k.Bools(one), ElementsAre(0, 1, 1, 0));
  const int a = k.IntInput({3}, {4, 5, 6});
  const int b = k.IntInput({}, {5});
  const int le = k.Output({3}, plan::BOOL);
  const int ge = k.Output({3}, plan::BOOL);
  k.Run("LessOrEqual", {a, b}, {le});
  k.Run("GreaterOrEqual", {a, b}, {ge});
  EXPECT_THAT(k.Bools(le), ElementsAre(1, 1, 0));
  EXPECT_THAT(k.Bools(ge), ElementsAre(0, 1, 1));
  const int x = k.Input({3}, {0.5f, 1, -1});
  try {
    k.Run("And", {x, x}, {le});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("And: input 0 has dtype float32"));
  }
}

// CastLike casts as Cast to the dtype of its second input, whose values it never reads.
TEST(CpuLogical, CastLikeTakesTheSecondInputsDtype) {
  KernelRunner k;
  const int x = k.Input({3}, {-2.7f, 0, 3.9f});
  const int like_int = k.IntInput({}, {99});
  const int like_bool = k.BoolInput({1}, {0});
  const int as_int = k.Output({3}, plan::INT64);
  const int as_bool = k.Output({3}, plan::BOOL);
  k.Run("CastLike", {x, like_int}, {as_int});
  k.Run("CastLike", {x, like_bool}, {as_bool});
  EXPECT_THAT(k.Int64s(as_int), ElementsAre(-2, 0, 3));
  EXPECT_THAT(k.Bools(as_bool), ElementsAre(1, 0, 1));
  try {
    k.Run("CastLike", {x, like_int}, {as_bool});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(),
                HasSubstr("CastLike: output 0 (the dtype of input 1) has dtype bool"));
  }
}

TEST(CpuLogical, CastRejectsUnsupportedTargetAndMismatchedOutput) {
  KernelRunner k;
  const int x = k.Input({1}, {1});
  const int y = k.Output({1});
  try {
    k.Run("Cast", {x}, {y}, {Int("to", 10)});  // float16
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Cast: to = 10 is not a data type Piper supports"));
  }
  try {
    k.Run("Cast", {x}, {y}, {Int("to", 7)});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Cast: output 0 (the dtype `to` names) has dtype float32"));
  }
}

}  // namespace
}  // namespace piper::engine::testing
