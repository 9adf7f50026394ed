// CPU math kernels: Pow, Sqrt, Reciprocal, Exp, Log, Erf, Max, Min and their gradients.
#include <gmock/gmock.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuMath, PowBroadcastsBaseAndExponent) {
  KernelRunner k;
  const int a = k.Input({2, 1}, {2, 3});
  const int b = k.Input({3}, {0, 1, 2.5});
  const int y = k.Output({2, 3});
  k.Run("Pow", {a, b}, {y});
  ExpectNear(k.Floats(y), {1, 2, std::pow(2.0, 2.5), 1, 3, std::pow(3.0, 2.5)}, 1e-5, "Pow", 1e-6);
}

TEST(CpuMath, PowScalarExponentFastPathsAndInt64Exponent) {
  for (float e : {1.0f, 2.0f, 3.0f, -1.5f}) {
    KernelRunner k;
    const int a = k.Input({3}, {0.5f, 2.0f, 3.0f});
    const int b = k.Input({}, {e});
    const int y = k.Output({3});
    k.Run("Pow", {a, b}, {y});
    ExpectNear(k.Floats(y), {std::pow(0.5, e), std::pow(2.0, e), std::pow(3.0, e)}, 1e-6,
               "Pow scalar " + std::to_string(e), 1e-6);
  }
  KernelRunner k;
  const int a = k.Input({3}, {-2, 0.5, 3});
  const int b = k.IntInput({}, {3});
  const int y = k.Output({3});
  k.Run("Pow", {a, b}, {y});
  EXPECT_THAT(k.Floats(y), ElementsAre(-8, 0.125, 27));
}

TEST(CpuMath, PowInt64) {
  KernelRunner k;
  const int a = k.IntInput({4}, {2, -3, 5, 1});
  const int b = k.IntInput({4}, {10, 3, 0, -2});
  const int y = k.Output({4}, plan::INT64);
  k.Run("Pow", {a, b}, {y});
  EXPECT_THAT(k.Int64s(y), ElementsAre(1024, -27, 1, 1));
  const int f = k.Input({4}, {0.5f, 2.0f, 1.0f, -1.0f});
  const int yf = k.Output({4}, plan::INT64);
  k.Run("Pow", {a, f}, {yf});
  EXPECT_THAT(k.Int64s(yf), ElementsAre(1, 9, 5, 1));  // sqrt(2) truncates to 1
}

TEST(CpuMath, PowRejectsMismatchedOutputDtype) {
  KernelRunner k;
  const int a = k.Input({2}, {1, 2});
  const int b = k.Input({2}, {1, 2});
  const int y = k.Output({2}, plan::INT64);
  try {
    k.Run("Pow", {a, b}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Pow: output 0"));
  }
}

TEST(CpuMath, UnaryOpsMatchClosedForms) {
  const std::vector<float> x = {0.25f, 1.0f, 4.0f, 9.0f};
  struct Case {
    const char* op;
    double (*f)(double);
  };
  const Case cases[] = {{"Sqrt", [](double v) { return std::sqrt(v); }},
                        {"Reciprocal", [](double v) { return 1.0 / v; }},
                        {"Exp", [](double v) { return std::exp(v); }},
                        {"Log", [](double v) { return std::log(v); }},
                        {"Erf", [](double v) { return std::erf(v); }}};
  for (const Case& c : cases) {
    KernelRunner k;
    const int in = k.Input({2, 2}, x);
    const int y = k.Output({2, 2});
    k.Run(c.op, {in}, {y});
    std::vector<double> expected;
    for (float v : x) expected.push_back(c.f(v));
    ExpectNear(k.Floats(y), expected, 1e-6, c.op, 1e-6);
  }
  KernelRunner k;
  const int in = k.Input({3}, {0, -1, 1});
  const int y = k.Output({3});
  k.Run("Erf", {in}, {y});
  ExpectNear(k.Floats(y), {0, -0.8427007929497149, 0.8427007929497149}, 1e-6, "Erf values");
}

TEST(CpuMath, MaxMinNaryBroadcast) {
  KernelRunner k;
  const int a = k.Input({2, 1}, {0, 5});
  const int b = k.Input({3}, {1, -2, 7});
  const int c = k.Input({}, {3});
  const int ymax = k.Output({2, 3});
  const int ymin = k.Output({2, 3});
  k.Run("Max", {a, b, c}, {ymax});
  k.Run("Min", {a, b, c}, {ymin});
  EXPECT_THAT(k.Floats(ymax), ElementsAre(3, 3, 7, 5, 5, 7));
  EXPECT_THAT(k.Floats(ymin), ElementsAre(0, -2, 0, 1, -2, 3));
}

TEST(CpuMath, MaxPropagatesNaNAndHandlesInt64AndOneInput) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  KernelRunner k;
  const int a = k.Input({2}, {nan, 1});
  const int b = k.Input({2}, {2, nan});
  const int y = k.Output({2});
  k.Run("Max", {a, b}, {y});
  EXPECT_TRUE(std::isnan(k.Floats(y)[0]));
  EXPECT_TRUE(std::isnan(k.Floats(y)[1]));
  const int i = k.IntInput({3}, {4, -1, 9});
  const int j = k.IntInput({1}, {2});
  const int yi = k.Output({3}, plan::INT64);
  k.Run("Min", {i, j}, {yi});
  EXPECT_THAT(k.Int64s(yi), ElementsAre(2, -1, 2));
  const int single = k.Output({3}, plan::INT64);
  k.Run("Max", {i}, {single});
  EXPECT_THAT(k.Int64s(single), ElementsAre(4, -1, 9));
}

TEST(CpuMath, PowGradients) {
  KernelRunner k;
  const int dy = k.Input({4}, {1, 2, 1, 1});
  const int a = k.Input({4}, {2, 3, 0, 0});
  const int b = k.Input({4}, {3, 0, 2, -1});
  const int y = k.Input({4}, {8, 1, 0, std::numeric_limits<float>::infinity()});
  const int da = k.Output({4});
  const int db = k.Output({4});
  k.Run("piper.PowBaseGrad", {dy, a, b}, {da});
  k.Run("piper.PowExponentGrad", {dy, a, y}, {db});
  // dA = dY·B·A^(B−1): 12, 0 (B = 0), 0 (2·0^1), −inf·... at A = 0, B = −1: −1·0^−2 = −inf.
  const auto dav = k.Floats(da);
  EXPECT_FLOAT_EQ(dav[0], 12.0f);
  EXPECT_EQ(dav[1], 0.0f);
  EXPECT_EQ(dav[2], 0.0f);
  EXPECT_TRUE(std::isinf(dav[3]) && dav[3] < 0);
  // dB = dY·Y·log(A): 8 log 2, 2 log 3, 0 at A = 0 with B ≥ 0, −inf at A = 0 with B < 0.
  const auto dbv = k.Floats(db);
  EXPECT_NEAR(dbv[0], 8 * std::log(2.0), 1e-5);
  EXPECT_NEAR(dbv[1], 2 * std::log(3.0), 1e-5);
  EXPECT_EQ(dbv[2], 0.0f);
  EXPECT_TRUE(std::isinf(dbv[3]) && dbv[3] < 0);
}

TEST(CpuMath, PowBaseGradWithBroadcastInt64Exponent) {
  KernelRunner k;
  const int dy = k.Input({2, 2}, {1, 1, 2, 2});
  const int a = k.Input({2, 2}, {1, 2, 3, 4});
  const int b = k.IntInput({}, {2});
  const int da = k.Output({2, 2});
  k.Run("piper.PowBaseGrad", {dy, a, b}, {da});
  EXPECT_THAT(k.Floats(da), ElementsAre(2, 4, 12, 16));
}

TEST(CpuMath, SavedTensorGradients) {
  KernelRunner k;
  const int dy = k.Input({3}, {1, 2, -1});
  const int s = k.Input({3}, {0.5f, 2, 0});
  const int sqrt_grad = k.Output({3});
  const int recip_grad = k.Output({3});
  const int erf_grad = k.Output({3});
  k.Run("piper.SqrtGrad", {dy, s}, {sqrt_grad});
  k.Run("piper.ReciprocalGrad", {dy, s}, {recip_grad});
  k.Run("piper.ErfGrad", {dy, s}, {erf_grad});
  EXPECT_FLOAT_EQ(k.Floats(sqrt_grad)[0], 1.0f);
  EXPECT_FLOAT_EQ(k.Floats(sqrt_grad)[1], 0.5f);
  EXPECT_THAT(k.Floats(recip_grad), ElementsAre(-0.25f, -8.0f, 0.0f));
  const double c = 2.0 * std::numbers::inv_sqrtpi;
  ExpectNear(k.Floats(erf_grad), {c * std::exp(-0.25), 2 * c * std::exp(-4.0), -c}, 1e-6,
             "ErfGrad");
}

TEST(CpuMath, MaxMinGradSplitsTiesEvenly) {
  KernelRunner k;
  // Max(a, b, c) with b broadcast along rows; ties at [0, 0] (a, b, c all 3) and [1, 1] (a, b).
  const int a = k.Input({2, 2}, {3, 1, 0, 4});
  const int b = k.Input({2}, {3, 4});
  const int c = k.Input({2, 2}, {3, 0, 2, 1});
  const int y = k.Input({2, 2}, {3, 4, 3, 4});
  const int dy = k.Input({2, 2}, {6, 1, 1, 2});
  const int da = k.Output({2, 2});
  const int db = k.Output({2, 2});
  const int dc = k.Output({2, 2});
  k.Run("piper.MaxMinGrad", {dy, y, a, b, c}, {da}, {Int("input", 0)});
  k.Run("piper.MaxMinGrad", {dy, y, a, b, c}, {db}, {Int("input", 1)});
  k.Run("piper.MaxMinGrad", {dy, y, a, b, c}, {dc}, {Int("input", 2)});
  EXPECT_THAT(k.Floats(da), ElementsAre(2, 0, 0, 1));
  EXPECT_THAT(k.Floats(db), ElementsAre(2, 1, 1, 1));  // b's values in Y's shape
  EXPECT_THAT(k.Floats(dc), ElementsAre(2, 0, 0, 0));
}

TEST(CpuMath, MaxMinGradRejectsBadInputIndex) {
  KernelRunner k;
  const int x = k.Input({2}, {1, 2});
  const int dx = k.Output({2});
  try {
    k.Run("piper.MaxMinGrad", {x, x, x, x}, {dx}, {Int("input", 2)});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("piper.MaxMinGrad: attribute input = 2"));
  }
}

}  // namespace
}  // namespace piper::engine::testing
