// bfloat16 on the CPU: Cast rounds to nearest even, and every other kernel computes on
// float32 copies of its bfloat16 tensors (engine/cpu/widened_kernel).
#include <gmock/gmock.h>

#include <cmath>
#include <limits>

#include "engine/cpu/split_invariant_gemm.h"
#include "engine_test_util.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;

// `values` through a bfloat16 tensor and back.
std::vector<float> RoundTrip(const std::vector<float>& values) {
  KernelRunner k;
  const Shape shape{static_cast<int64_t>(values.size())};
  const int x = k.Input(shape, values);
  const int narrow = k.Output(shape, plan::BFLOAT16);
  const int wide = k.Output(shape);
  k.Run("Cast", {x}, {narrow}, {Int("to", 16)});
  k.Run("Cast", {narrow}, {wide}, {Int("to", 1)});
  return k.Floats(wide);
}

TEST(CpuBfloat16, CastRoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -7);  // bfloat16 spacing in [1, 2)
  const std::vector<float> wide =
      RoundTrip({1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp * 0.51f, -2.5f, -0.0f, 3.4e38f, 1e-40f});
  EXPECT_EQ(wide[0], 1.0f);         // a tie goes to the even mantissa
  EXPECT_EQ(wide[1], 1 + 2 * ulp);  // and so does this one
  EXPECT_EQ(wide[2], 1 + ulp);      // above the tie rounds up
  EXPECT_EQ(wide[3], -2.5f);        // exact values stay
  EXPECT_TRUE(std::signbit(wide[4]));
  EXPECT_TRUE(std::isinf(wide[5]));  // above the largest bfloat16
  EXPECT_GT(wide[6], 0.0f);          // subnormals keep their upper bits
}

TEST(CpuBfloat16, CastKeepsNaNAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> wide = RoundTrip({std::numeric_limits<float>::quiet_NaN(), inf, -inf});
  EXPECT_TRUE(std::isnan(wide[0]));
  EXPECT_EQ(wide[1], inf);
  EXPECT_EQ(wide[2], -inf);
}

TEST(CpuBfloat16, CastBetweenBfloat16AndIntegers) {
  KernelRunner k;
  const int n = k.IntInput({3}, {-3, 0, 257});
  const int narrow = k.Output({3}, plan::BFLOAT16);
  const int back = k.Output({3}, plan::INT64);
  k.Run("Cast", {n}, {narrow}, {Int("to", 16)});
  k.Run("Cast", {narrow}, {back}, {Int("to", 7)});
  EXPECT_THAT(k.Int64s(back), ElementsAre(-3, 0, 256));  // 257 needs 9 significant bits
}

// A MatMul on bfloat16 tensors equals the float32 MatMul of the rounded inputs, rounded; with
// a float32 output (a weight gradient) it is not rounded at all.
TEST(CpuBfloat16, KernelsComputeInFloat32OnWidenedCopies) {
  const std::vector<float> a_values = {0.1f, -1.3f, 2.7f, 0.333f, 5.01f, -0.77f};
  const std::vector<float> b_values = {1.1f, 0.9f, -0.3f, 0.61f, 2.2f, -1.9f};
  KernelRunner k;
  const int a = k.Input({2, 3}, a_values);
  const int b = k.Input({3, 2}, b_values);
  const int a16 = k.Output({2, 3}, plan::BFLOAT16);
  const int b16 = k.Output({3, 2}, plan::BFLOAT16);
  k.Run("Cast", {a}, {a16}, {Int("to", 16)});
  k.Run("Cast", {b}, {b16}, {Int("to", 16)});
  const int y16 = k.Output({2, 2}, plan::BFLOAT16);
  const int y32 = k.Output({2, 2});
  k.Run("MatMul", {a16, b16}, {y16});
  k.Run("MatMul", {a16, b16}, {y32});
  const int y16_wide = k.Output({2, 2});
  k.Run("Cast", {y16}, {y16_wide}, {Int("to", 1)});

  // The float32 product of the rounded operands, summed as bfloat16 products are
  // (split_invariant_gemm.h).
  const std::vector<float> a_rounded = RoundTrip(a_values), b_rounded = RoundTrip(b_values);
  std::vector<float> expected(4);
  cpu::split_invariant_sgemm(false, false, 2, 2, 3, 1.0f, a_rounded.data(), 3, b_rounded.data(), 2,
                             0.0f, expected.data(), 2);
  EXPECT_EQ(k.Floats(y32), expected);
  EXPECT_EQ(k.Floats(y16_wide), RoundTrip(expected));
  EXPECT_NE(k.Floats(y16_wide), expected);
}

// A kernel that reads and writes one bfloat16 tensor (in place) sees its current values.
TEST(CpuBfloat16, InPlaceKernelsReadTheirOutputs) {
  KernelRunner k;
  const int x = k.Input({3}, {1.5f, -2.0f, 0.25f});
  const int x16 = k.Output({3}, plan::BFLOAT16);
  k.Run("Cast", {x}, {x16}, {Int("to", 16)});
  k.Run("Add", {x16, x16}, {x16});
  const int wide = k.Output({3});
  k.Run("Cast", {x16}, {wide}, {Int("to", 1)});
  EXPECT_THAT(k.Floats(wide), ElementsAre(3.0f, -4.0f, 0.5f));
}

}  // namespace
}  // namespace piper::engine::testing
