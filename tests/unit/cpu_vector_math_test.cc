// vector_math.h against the double-precision functions: exp within 2 ulp, erf within 4e-7,
// sigmoid within 2 ulp, special values as std::exp and std::erf, and the array functions (one
// copy per vector width) equal to the inline ones.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/vector_math.h"

namespace piper::engine::cpu {
namespace {

std::vector<float> grid(double from, double to, double step) {
  std::vector<float> x;
  for (double v = from; v <= to; v += step) x.push_back(static_cast<float>(v));
  return x;
}

TEST(VectorMath, ExpWithinTwoUlpOfDoubleExp) {
  const std::vector<float> x = grid(-86.9, 88.72, 0.0007);
  std::vector<float> y(x.size());
  exp_n(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0.0;
  float worst_at = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const double reference = std::exp(static_cast<double>(x[i]));
    const auto rounded = static_cast<float>(reference);
    const double ulp = std::nextafter(rounded, std::numeric_limits<float>::infinity()) - rounded;
    const double error = std::fabs(y[i] - reference) / ulp;
    if (error > worst) {
      worst = error;
      worst_at = x[i];
    }
  }
  EXPECT_LE(worst, 2.0) << "worst at x = " << worst_at;
}

TEST(VectorMath, ErfWithinFourTenMillionths) {
  const std::vector<float> x = grid(-6.0, 6.0, 0.00003);
  std::vector<float> y(x.size());
  erf_n(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst_absolute = 0.0, worst_relative = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double reference = std::erf(static_cast<double>(x[i]));
    const double error = std::fabs(y[i] - reference);
    worst_absolute = std::max(worst_absolute, error);
    if (reference != 0.0) worst_relative = std::max(worst_relative, error / std::fabs(reference));
  }
  EXPECT_LE(worst_absolute, 4e-7);
  EXPECT_LE(worst_relative, 4e-7);
}

TEST(VectorMath, SigmoidWithinTwoUlpOfDoubleSigmoid) {
  std::vector<float> x = grid(-100.0, 100.0, 0.001);
  std::vector<float> y(x.size());
  sigmoid_n(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0.0;
  float worst_at = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const double reference = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    const auto rounded = static_cast<float>(reference);
    const double ulp = std::nextafter(rounded, std::numeric_limits<float>::infinity()) - rounded;
    const double error = ulp > 0.0 ? std::fabs(y[i] - reference) / ulp : 0.0;
    if (reference > 1e-30 && error > worst) {
      worst = error;
      worst_at = x[i];
    }
  }
  EXPECT_LE(worst, 2.0) << "worst at x = " << worst_at;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.0f};
  sigmoid_n(special.data(), special.data(), 4);
  EXPECT_EQ(special[0], 1.0f);
  EXPECT_EQ(special[1], 0.0f);
  EXPECT_TRUE(std::isnan(special[2]));
  EXPECT_EQ(special[3], 0.5f);
}

TEST(VectorMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(vexp(0.0f), 1.0f);
  EXPECT_EQ(vexp(-inf), 0.0f);
  EXPECT_EQ(vexp(-100.0f), 0.0f);
  EXPECT_EQ(vexp(inf), inf);
  EXPECT_EQ(vexp(89.0f), inf);
  EXPECT_TRUE(std::isfinite(vexp(88.72f)));
  EXPECT_TRUE(std::isnan(vexp(nan)));
  EXPECT_EQ(verf(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(verf(-0.0f)));
  EXPECT_EQ(verf(inf), 1.0f);
  EXPECT_EQ(verf(-inf), -1.0f);
  EXPECT_EQ(verf(10.0f), 1.0f);
  EXPECT_TRUE(std::isnan(verf(nan)));
}

TEST(VectorMath, ArrayFunctionsEqualTheInlineOnesInPlaceToo) {
  std::vector<float> x = grid(-10.0, 10.0, 0.01);
  x.push_back(std::numeric_limits<float>::infinity());
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> e = x, f = x;
  exp_n(e.data(), e.data(), n);
  erf_n(f.data(), f.data(), n);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(e[i], vexp(x[i])) << "x = " << x[i];
    EXPECT_EQ(f[i], verf(x[i])) << "x = " << x[i];
  }
}

// erf_n takes a shorter path through runs of elements below 2 in magnitude; runs with one
// element beyond (or a NaN) take verf's whole path. Both give verf's values.
TEST(VectorMath, ErfArrayEqualsInlineWithAndWithoutLargeArguments) {
  std::vector<float> x;
  for (int i = 0; i < 300; ++i) x.push_back(-1.99f + 3.98f * static_cast<float>(i) / 299.0f);
  x[10] = std::numeric_limits<float>::quiet_NaN();
  x[130] = 3.0f;
  x[260] = -2.0f;
  std::vector<float> y(x.size());
  erf_n(x.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(std::isnan(y[10]));
  for (size_t i = 0; i < x.size(); ++i) {
    if (i != 10) {
      EXPECT_EQ(y[i], verf(x[i])) << "x = " << x[i];
    }
  }
}

}  // namespace
}  // namespace piper::engine::cpu
