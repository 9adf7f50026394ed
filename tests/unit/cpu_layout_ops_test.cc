// CPU layout and sequence kernels: Concat, Split, Slice and piper.SliceGrad,
// Expand, Where, Trilu, CumSum, Range, ConstantOfShape.
#include <gmock/gmock.h>

#include <limits>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuLayoutOps, ConcatMiddleAxis) {
  KernelRunner r;
  const int a = r.Input({2, 1, 2}, {1, 2, 3, 4});
  const int b = r.Input({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12});
  const int y = r.Output({2, 3, 2});
  r.Run("Concat", {a, b}, {y}, {Int("axis", -2)});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12));
}

TEST(CpuLayoutOps, ConcatInt64AndShapeCheck) {
  KernelRunner r;
  const int a = r.IntInput({2}, {1, 2});
  const int b = r.IntInput({1}, {3});
  const int y = r.Output({3}, plan::INT64);
  r.Run("Concat", {a, b}, {y}, {Int("axis", 0)});
  EXPECT_THAT(r.Int64s(y), ElementsAre(1, 2, 3));
  const int bad = r.Output({4}, plan::INT64);
  EXPECT_THROW(r.Prepare("Concat", {a, b}, {bad}, {Int("axis", 0)}), Error);
}

TEST(CpuLayoutOps, SplitWithAndWithoutSplitInput) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int split = r.IntInput({2}, {1, 2});
  const int a = r.Output({2, 1});
  const int b = r.Output({2, 2});
  r.Run("Split", {x, split}, {a, b}, {Int("axis", 1)});
  EXPECT_THAT(r.Floats(a), ElementsAre(1, 4));
  EXPECT_THAT(r.Floats(b), ElementsAre(2, 3, 5, 6));
  const int c = r.Output({1, 3});
  const int d = r.Output({1, 3});
  r.Run("Split", {x}, {c, d});
  EXPECT_THAT(r.Floats(c), ElementsAre(1, 2, 3));
  EXPECT_THAT(r.Floats(d), ElementsAre(4, 5, 6));
  const int wrong = r.IntInput({2}, {2, 1});
  try {
    r.Prepare("Split", {x, wrong}, {a, b}, {Int("axis", 1)});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Split: split (input 1) [2, 1] does not match"));
  }
}

TEST(CpuLayoutOps, SliceWithAxesAndSteps) {
  KernelRunner r;
  const int x = r.Input({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const int starts = r.IntInput({2}, {1, 0});
  const int ends = r.IntInput({2}, {1000, 3});
  const int axes = r.IntInput({2}, {-1, 0});
  const int steps = r.IntInput({2}, {2, 2});
  const int y = r.Output({2, 2});
  r.Run("Slice", {x, starts, ends, axes, steps}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 3, 9, 11));
}

TEST(CpuLayoutOps, SliceNegativeStepReverses) {
  KernelRunner r;
  const int x = r.IntInput({5}, {0, 1, 2, 3, 4});
  const int starts = r.IntInput({1}, {-1});
  const int ends = r.IntInput({1}, {-1000});
  const int axes = r.IntInput({1}, {0});
  const int steps = r.IntInput({1}, {-2});
  const int y = r.Output({3}, plan::INT64);
  r.Run("Slice", {x, starts, ends, axes, steps}, {y});
  EXPECT_THAT(r.Int64s(y), ElementsAre(4, 2, 0));
}

// PyTorch's open slices: x[1:] ends at INT64_MAX, x[::-1] at INT64_MIN, with steps whose
// magnitude exceeds any extent.
TEST(CpuLayoutOps, SliceOpenEndsAndHugeSteps) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  KernelRunner r;
  const int x = r.IntInput({5}, {0, 1, 2, 3, 4});
  const int open_start = r.IntInput({1}, {1});
  const int open_end = r.IntInput({1}, {kMax});
  const int tail = r.Output({4}, plan::INT64);
  r.Run("Slice", {x, open_start, open_end}, {tail});
  EXPECT_THAT(r.Int64s(tail), ElementsAre(1, 2, 3, 4));
  const int from_end = r.IntInput({1}, {kMax});
  const int to_start = r.IntInput({1}, {kMin});
  const int axes = r.IntInput({1}, {0});
  const int back = r.IntInput({1}, {-1});
  const int reversed = r.Output({5}, plan::INT64);
  r.Run("Slice", {x, from_end, to_start, axes, back}, {reversed});
  EXPECT_THAT(r.Int64s(reversed), ElementsAre(4, 3, 2, 1, 0));
  const int zero = r.IntInput({1}, {0});
  const int huge_step = r.IntInput({1}, {kMax});
  const int first = r.Output({1}, plan::INT64);
  r.Run("Slice", {x, zero, open_end, axes, huge_step}, {first});
  EXPECT_THAT(r.Int64s(first), ElementsAre(0));
  const int most_negative = r.IntInput({1}, {kMin});
  const int last = r.Output({1}, plan::INT64);
  r.Run("Slice", {x, from_end, to_start, axes, most_negative}, {last});
  EXPECT_THAT(r.Int64s(last), ElementsAre(4));
}

TEST(CpuLayoutOps, SliceDefaultAxesAndRejectsShapeMismatch) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int starts = r.IntInput({2}, {1, 1});
  const int ends = r.IntInput({2}, {2, 3});
  const int y = r.Output({1, 2});
  r.Run("Slice", {x, starts, ends}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(5, 6));
  const int bad = r.Output({1, 3});
  try {
    r.Prepare("Slice", {x, starts, ends}, {bad});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Slice: slicing [2, 3] gives [1, 2]"));
  }
}

TEST(CpuLayoutOps, SliceRereadsChangedStarts) {
  KernelRunner r;
  const int x = r.Input({4}, {1, 2, 3, 4});
  const int starts = r.IntInput({1}, {0});
  const int ends = r.IntInput({1}, {2});
  const int y = r.Output({2});
  auto kernel = r.Prepare("Slice", {x, starts, ends}, {y});
  kernel->run({});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 2));
  const int64_t two = 2, four = 4;
  std::memcpy(r.Int64Data(starts), &two, sizeof two);
  std::memcpy(r.Int64Data(ends), &four, sizeof four);
  kernel->run({});
  EXPECT_THAT(r.Floats(y), ElementsAre(3, 4));
}

TEST(CpuLayoutOps, SliceGradWritesIntoZeros) {
  KernelRunner r;
  const int dy = r.Input({2, 2}, {1, 2, 3, 4});
  const int starts = r.IntInput({2}, {2, 0});
  const int ends = r.IntInput({2}, {-1000, 3});
  const int axes = r.IntInput({2}, {1, 0});
  const int steps = r.IntInput({2}, {-2, 2});
  const int dx = r.Output({3, 3});
  r.Set(dx, std::vector<float>(9, 9));
  r.Run("piper.SliceGrad", {dy, starts, ends, axes, steps}, {dx});
  // Rows 0 and 2, columns 2 then 0.
  EXPECT_THAT(r.Floats(dx), ElementsAre(2, 0, 1, 0, 0, 0, 4, 0, 3));
}

TEST(CpuLayoutOps, ExpandBroadcastsBothWays) {
  KernelRunner r;
  const int x = r.Input({3, 1}, {1, 2, 3});
  const int shape = r.IntInput({3}, {2, 1, 2});
  const int y = r.Output({2, 3, 2});
  r.Run("Expand", {x, shape}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3));
  const int bad = r.Output({2, 2});
  EXPECT_THROW(r.Prepare("Expand", {x, shape}, {bad}), Error);
}

TEST(CpuLayoutOps, WhereBroadcastsConditionAndBranches) {
  KernelRunner r;
  const int c = r.BoolInput({2, 1}, {1, 0});
  const int x = r.Input({3}, {1, 2, 3});
  const int y = r.Input({}, {-1});
  const int out = r.Output({2, 3});
  r.Run("Where", {c, x, y}, {out});
  EXPECT_THAT(r.Floats(out), ElementsAre(1, 2, 3, -1, -1, -1));
  const int ci = r.BoolInput({3}, {0, 1, 0});
  const int xi = r.IntInput({3}, {1, 2, 3});
  const int yi = r.IntInput({3}, {7, 8, 9});
  const int oi = r.Output({3}, plan::INT64);
  r.Run("Where", {ci, xi, yi}, {oi});
  EXPECT_THAT(r.Int64s(oi), ElementsAre(7, 2, 9));
}

TEST(CpuLayoutOps, TriluUpperLowerAndK) {
  const std::vector<float> m = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // [3, 4]
  KernelRunner r;
  const int x = r.Input({3, 4}, m);
  const int upper = r.Output({3, 4});
  r.Run("Trilu", {x}, {upper});
  EXPECT_THAT(r.Floats(upper), ElementsAre(1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12));
  const int k = r.IntInput({}, {-1});
  const int lower = r.Output({3, 4});
  r.Run("Trilu", {x, k}, {lower}, {Int("upper", 0)});
  EXPECT_THAT(r.Floats(lower), ElementsAre(0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0));
  const int k2 = r.IntInput({}, {2});
  const int upper2 = r.Output({3, 4});
  r.Run("Trilu", {x, k2}, {upper2});
  EXPECT_THAT(r.Floats(upper2), ElementsAre(0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0));
}

TEST(CpuLayoutOps, TriluBatched) {
  KernelRunner r;
  const int x = r.Input({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const int y = r.Output({2, 2, 2});
  r.Run("Trilu", {x}, {y}, {Int("upper", 0)});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 0, 3, 4, 5, 0, 7, 8));
}

TEST(CpuLayoutOps, CumSumModes) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int axis = r.IntInput({}, {1});
  const int y = r.Output({2, 3});
  r.Run("CumSum", {x, axis}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 3, 6, 4, 9, 15));
  r.Run("CumSum", {x, axis}, {y}, {Int("exclusive", 1)});
  EXPECT_THAT(r.Floats(y), ElementsAre(0, 1, 3, 0, 4, 9));
  r.Run("CumSum", {x, axis}, {y}, {Int("reverse", 1)});
  EXPECT_THAT(r.Floats(y), ElementsAre(6, 5, 3, 15, 11, 6));
  r.Run("CumSum", {x, axis}, {y}, {Int("reverse", 1), Int("exclusive", 1)});
  EXPECT_THAT(r.Floats(y), ElementsAre(5, 3, 0, 11, 6, 0));
  const int axis0 = r.IntInput({1}, {-2});
  r.Run("CumSum", {x, axis0}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 2, 3, 5, 7, 9));
  const int xi = r.IntInput({3}, {1, 2, 3});
  const int zero = r.IntInput({}, {0});
  const int yi = r.Output({3}, plan::INT64);
  r.Run("CumSum", {xi, zero}, {yi});
  EXPECT_THAT(r.Int64s(yi), ElementsAre(1, 3, 6));
}

TEST(CpuLayoutOps, RangeFloatAndInt) {
  KernelRunner r;
  const int start = r.Input({}, {1});
  const int limit = r.Input({}, {2});
  const int delta = r.Input({}, {0.25f});
  const int y = r.Output({4});
  r.Run("Range", {start, limit, delta}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 1.25, 1.5, 1.75));
  const int s = r.IntInput({}, {10});
  const int l = r.IntInput({}, {4});
  const int d = r.IntInput({}, {-3});
  const int yi = r.Output({2}, plan::INT64);
  r.Run("Range", {s, l, d}, {yi});
  EXPECT_THAT(r.Int64s(yi), ElementsAre(10, 7));
}

TEST(CpuLayoutOps, ConstantOfShapeFillsWithValue) {
  KernelRunner r;
  const int shape = r.IntInput({2}, {2, 2});
  const int y = r.Output({2, 2});
  r.Set(y, {1, 1, 1, 1});
  r.Run("ConstantOfShape", {shape}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(0, 0, 0, 0));
  const int yi = r.Output({2, 2}, plan::INT64);
  r.Run("ConstantOfShape", {shape}, {yi}, {Int("value", 7)});
  EXPECT_THAT(r.Int64s(yi), ElementsAre(7, 7, 7, 7));
  const int yf = r.Output({2, 2});
  r.Run("ConstantOfShape", {shape}, {yf}, {Float("value", 0.5)});
  EXPECT_THAT(r.Floats(yf), ElementsAre(0.5, 0.5, 0.5, 0.5));
}

}  // namespace
}  // namespace piper::engine::testing
