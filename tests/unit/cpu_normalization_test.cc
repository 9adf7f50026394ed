// CPU row-wise normalizations: Softmax, LogSoftmax, LayerNormalization and their gradients,
// against double-precision references.
#include <gmock/gmock.h>

#include <cmath>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::HasSubstr;

// Softmax (or log-softmax) of x viewed as [outer, n, inner] along the middle axis.
std::vector<double> SoftmaxReference(const std::vector<float>& x, int64_t outer, int64_t n,
                                     int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t i) { return (o * n + i) * inner + j; };
      double m = -INFINITY;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[at(i)]));
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(x[at(i)] - m);
      for (int64_t i = 0; i < n; ++i) {
        y[at(i)] = log ? x[at(i)] - m - std::log(sum) : std::exp(x[at(i)] - m) / sum;
      }
    }
  }
  return y;
}

TEST(CpuNormalization, SoftmaxLastAxisHandValues) {
  KernelRunner k;
  const int x = k.Input({2, 3}, {0, 0, 0, 1, 2, 3});
  const int y = k.Output({2, 3});
  k.Run("Softmax", {x}, {y});
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0);
  const double s = e1 + e2 + e3;
  ExpectNear(k.Floats(y), {1.0 / 3, 1.0 / 3, 1.0 / 3, e1 / s, e2 / s, e3 / s}, 1e-6, "Softmax");
}

TEST(CpuNormalization, SoftmaxAndLogSoftmaxAlongEveryAxis) {
  const Shape shape = {2, 3, 4};
  const std::vector<float> values = TestValues(24, 3);
  for (bool log : {false, true}) {
    for (int64_t axis : {0, 1, 2, -1, -2}) {
      const int64_t a = axis < 0 ? axis + 3 : axis;
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < a; ++d) outer *= shape[d];
      for (int64_t d = a + 1; d < 3; ++d) inner *= shape[d];
      KernelRunner k;
      const int x = k.Input(shape, values);
      const int y = k.Output(shape);
      const char* op = log ? "LogSoftmax" : "Softmax";
      k.Run(op, {x}, {y}, {Int("axis", axis)});
      ExpectNear(k.Floats(y), SoftmaxReference(values, outer, shape[a], inner, log), 1e-6,
                 std::string(op) + " axis " + std::to_string(axis));
    }
  }
}

TEST(CpuNormalization, SoftmaxIsStableForLargeInputs) {
  KernelRunner k;
  const int x = k.Input({3}, {1000, 1000, -1000});
  const int y = k.Output({3});
  const int ly = k.Output({3});
  k.Run("Softmax", {x}, {y});
  k.Run("LogSoftmax", {x}, {ly});
  ExpectNear(k.Floats(y), {0.5, 0.5, 0}, 1e-7, "Softmax");
  ExpectNear(k.Floats(ly), {-std::log(2.0), -std::log(2.0), -2000 - std::log(2.0)}, 1e-3,
             "LogSoftmax");
}

TEST(CpuNormalization, SoftmaxGradAndLogSoftmaxGradMatchFormulas) {
  const Shape shape = {2, 3, 4};
  for (int64_t axis : {1, -1}) {
    const int64_t a = axis < 0 ? axis + 3 : axis;
    const int64_t outer = a == 1 ? 2 : 6, n = shape[a], inner = a == 1 ? 4 : 1;
    const std::vector<float> x = TestValues(24, 5);
    const std::vector<float> g = TestValues(24, 6);
    for (bool log : {false, true}) {
      const std::vector<double> yd = SoftmaxReference(x, outer, n, inner, log);
      const std::vector<float> y(yd.begin(), yd.end());
      std::vector<double> expected(24);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t j = 0; j < inner; ++j) {
          auto at = [&](int64_t i) { return (o * n + i) * inner + j; };
          double sum = 0;
          for (int64_t i = 0; i < n; ++i) sum += log ? g[at(i)] : g[at(i)] * y[at(i)];
          for (int64_t i = 0; i < n; ++i) {
            expected[at(i)] =
                log ? g[at(i)] - std::exp(y[at(i)]) * sum : y[at(i)] * (g[at(i)] - sum);
          }
        }
      }
      KernelRunner k;
      const int dy = k.Input(shape, g);
      const int yy = k.Input(shape, y);
      const int dx = k.Output(shape);
      const std::string op = log ? "piper.LogSoftmaxGrad" : "piper.SoftmaxGrad";
      k.Run(op, {dy, yy}, {dx}, {Int("axis", axis)});
      ExpectNear(k.Floats(dx), expected, 1e-6, op + " axis " + std::to_string(axis));
    }
  }
}

TEST(CpuNormalization, SoftmaxRejectsAxisOutOfRange) {
  KernelRunner k;
  const int x = k.Input({2, 2}, {1, 2, 3, 4});
  const int y = k.Output({2, 2});
  try {
    k.Run("Softmax", {x}, {y}, {Int("axis", 2)});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Softmax: axis 2 is out of range for rank 2"));
  }
}

// LayerNormalization of x as [rows, n] in double: y, mean, inverse standard deviation.
struct LayerNormReference {
  std::vector<double> y, mean, inv_std;
};

LayerNormReference LayerNorm(const std::vector<float>& x, const std::vector<float>& scale,
                             const std::vector<float>& bias, int64_t rows, int64_t n,
                             double epsilon) {
  LayerNormReference r;
  for (int64_t row = 0; row < rows; ++row) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += x[row * n + i];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) var += (x[row * n + i] - mean) * (x[row * n + i] - mean);
    const double inv = 1.0 / std::sqrt(var / n + epsilon);
    for (int64_t i = 0; i < n; ++i) {
      r.y.push_back((x[row * n + i] - mean) * inv * scale[i] + (bias.empty() ? 0.0 : bias[i]));
    }
    r.mean.push_back(mean);
    r.inv_std.push_back(inv);
  }
  return r;
}

TEST(CpuNormalization, LayerNormalizationHandValues) {
  KernelRunner k;
  const int x = k.Input({2, 2}, {1, 3, -2, 2});
  const int scale = k.Input({2}, {1, 2});
  const int bias = k.Input({2}, {0, 1});
  const int y = k.Output({2, 2});
  const int mean = k.Output({2, 1});
  const int inv = k.Output({2, 1});
  k.Run("LayerNormalization", {x, scale, bias}, {y, mean, inv}, {Float("epsilon", 0.0)});
  ExpectNear(k.Floats(y), {-1, 3, -1, 3}, 1e-6, "Y");
  ExpectNear(k.Floats(mean), {2, 0}, 1e-6, "Mean");
  ExpectNear(k.Floats(inv), {1, 0.5}, 1e-6, "InvStdDev");
}

TEST(CpuNormalization, LayerNormalizationOverTrailingAxes) {
  const Shape shape = {3, 2, 5};
  const std::vector<float> xv = TestValues(30, 7);
  const std::vector<float> sv = TestValues(10, 8);
  const std::vector<float> bv = TestValues(10, 9);
  for (int64_t axis : {1, -1}) {
    const int64_t rows = axis == 1 ? 3 : 6, n = axis == 1 ? 10 : 5;
    const Shape affine = axis == 1 ? Shape{2, 5} : Shape{5};
    const Shape stats = axis == 1 ? Shape{3, 1, 1} : Shape{3, 2, 1};
    const std::vector<float> s(sv.begin(), sv.begin() + n), b(bv.begin(), bv.begin() + n);
    const LayerNormReference ref = LayerNorm(xv, s, b, rows, n, 1e-5);
    KernelRunner k;
    const int x = k.Input(shape, xv);
    const int scale = k.Input(affine, s);
    const int bias = k.Input(affine, b);
    const int y = k.Output(shape);
    const int mean = k.Output(stats);
    const int inv = k.Output(stats);
    k.Run("LayerNormalization", {x, scale, bias}, {y, mean, inv}, {Int("axis", axis)});
    ExpectNear(k.Floats(y), ref.y, 1e-5, "Y axis " + std::to_string(axis));
    ExpectNear(k.Floats(mean), ref.mean, 1e-6, "Mean");
    ExpectNear(k.Floats(inv), ref.inv_std, 1e-4, "InvStdDev", 1e-5);
    // Without bias and without the optional outputs.
    const LayerNormReference plain = LayerNorm(xv, s, {}, rows, n, 1e-5);
    const int y2 = k.Output(shape);
    k.Run("LayerNormalization", {x, scale}, {y2}, {Int("axis", axis)});
    ExpectNear(k.Floats(y2), plain.y, 1e-5, "Y without bias");
  }
}

TEST(CpuNormalization, LayerNormalizationRejectsWrongScale) {
  KernelRunner k;
  const int x = k.Input({2, 3}, TestValues(6));
  const int scale = k.Input({2}, {1, 1});
  const int y = k.Output({2, 3});
  try {
    k.Run("LayerNormalization", {x, scale}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("LayerNormalization: Scale (input 1) has shape [2]"));
  }
}

// The gradient against central differences of the double reference:
// loss = Σ dY · LayerNorm(X, scale, bias).
TEST(CpuNormalization, LayerNormalizationGradMatchesFiniteDifferences) {
  const int64_t rows = 3, n = 6;
  const std::vector<float> xv = TestValues(rows * n, 11);
  const std::vector<float> sv = TestValues(n, 12);
  const std::vector<float> bv = TestValues(n, 13);
  const std::vector<float> gv = TestValues(rows * n, 14);
  const double epsilon = 1e-5;
  const auto loss = [&](const std::vector<float>& x, const std::vector<float>& s,
                        const std::vector<float>& b) {
    const LayerNormReference r = LayerNorm(x, s, b, rows, n, epsilon);
    double total = 0;
    for (size_t i = 0; i < r.y.size(); ++i) total += gv[i] * r.y[i];
    return total;
  };
  // d loss / d (x, scale or bias)[i] by central differences; `which` picks the tensor.
  const auto numeric = [&](int which) {
    std::vector<std::vector<float>> args = {xv, sv, bv};
    std::vector<double> grad;
    const float h = 1e-3f;
    for (float& v : args[which]) {
      const float original = v;
      v = original + h;
      const double up = loss(args[0], args[1], args[2]);
      v = original - h;
      const double down = loss(args[0], args[1], args[2]);
      v = original;
      grad.push_back((up - down) / (2 * h));
    }
    return grad;
  };
  const std::vector<double> dx_ref = numeric(0), ds_ref = numeric(1), db_ref = numeric(2);
  const LayerNormReference ref = LayerNorm(xv, sv, bv, rows, n, epsilon);
  KernelRunner k;
  const int dy = k.Input({rows, n}, gv);
  const int xi = k.Input({rows, n}, xv);
  const int scale = k.Input({n}, sv);
  const int mean = k.Input({rows, 1}, {ref.mean.begin(), ref.mean.end()});
  const int inv = k.Input({rows, 1}, {ref.inv_std.begin(), ref.inv_std.end()});
  const int dx = k.Output({rows, n});
  const int ds = k.Output({n});
  const int db = k.Output({n});
  k.Run("piper.LayerNormalizationGrad", {dy, xi, scale, mean, inv}, {dx, ds, db});
  ExpectNear(k.Floats(dx), dx_ref, 2e-3, "dX", 2e-3);
  ExpectNear(k.Floats(ds), ds_ref, 2e-3, "dScale", 2e-3);
  ExpectNear(k.Floats(db), db_ref, 2e-3, "dBias", 2e-3);
  // Only dScale requested: the other outputs are omitted.
  const int ds_only = k.Output({n});
  k.Run("piper.LayerNormalizationGrad", {dy, xi, scale, mean, inv},
        {KernelRunner::kOmitted, ds_only});
  ExpectNear(k.Floats(ds_only), ToDouble(k.Floats(ds)), 0, "dScale alone");
}

}  // namespace
}  // namespace piper::engine::testing
