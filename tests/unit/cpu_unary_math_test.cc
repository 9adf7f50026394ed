// CPU element-wise unary math (activation_math.h): the values at the edges ONNX's node tests
// leave out (NaN, ±0, infinities, halves, the threshold itself), numpy's results for them
// (ONNX's reference), int64 Abs and Sign, IsNaN and IsInf, and the dtype checks.
#include <gmock/gmock.h>

#include <cmath>
#include <limits>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The op on `x` with float32 output.
std::vector<float> RunFloat(const std::string& op, const std::vector<float>& x,
                            const std::vector<plan::Attribute>& attributes = {}) {
  KernelRunner k;
  const Shape shape = {static_cast<int64_t>(x.size())};
  const int in = k.Input(shape, x);
  const int out = k.Output(shape);
  k.Run(op, {in}, {out}, attributes);
  return k.Floats(out);
}

// Expects `got` to equal `want` element by element, NaN matching NaN and zeros their sign.
void ExpectSameFloats(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "]: " << got[i];
    } else {
      EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << what << "[" << i << "] sign";
    }
  }
}

TEST(CpuUnaryMath, RoundingMatchesNumpyIncludingHalvesToEven) {
  const std::vector<float> x = {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, -0.2f, kInf, kNaN};
  // np.round, np.floor, np.ceil
  ExpectSameFloats(RunFloat("Round", x), {-2, -2, -0.0f, 0, 2, 2, -0.0f, kInf, kNaN}, "Round");
  ExpectSameFloats(RunFloat("Floor", x), {-3, -2, -1, 0, 1, 2, -1, kInf, kNaN}, "Floor");
  ExpectSameFloats(RunFloat("Ceil", x), {-2, -1, -0.0f, 1, 2, 3, -0.0f, kInf, kNaN}, "Ceil");
}

TEST(CpuUnaryMath, SignIsZeroForBothZerosAndKeepsNaN) {
  // np.sign([-3, -0.0, 0.0, 2, -inf, nan]) = [-1, 0, 0, 1, -1, nan]
  ExpectSameFloats(RunFloat("Sign", {-3, -0.0f, 0.0f, 2, -kInf, kNaN}), {-1, 0, 0, 1, -1, kNaN},
                   "Sign");
}

TEST(CpuUnaryMath, ThresholdedReluZeroAtAlphaAndKeepsNaN) {
  ExpectSameFloats(RunFloat("ThresholdedRelu", {0.5f, 1.0f, 1.25f, -2, kNaN}),
                   {0, 0, 1.25f, 0, kNaN}, "ThresholdedRelu default alpha 1");
  ExpectSameFloats(RunFloat("ThresholdedRelu", {0.5f, 0.25f, -0.1f}, {Float("alpha", 0.25)}),
                   {0.5f, 0, 0}, "ThresholdedRelu alpha 0.25");
}

TEST(CpuUnaryMath, SoftsignAndTrigonometryMatchClosedForms) {
  struct Case {
    const char* op;
    double (*f)(double);
    float offset = 0;  // moves the inputs into the op's domain
  };
  const Case cases[] = {{"Softsign", [](double v) { return v / (1 + std::abs(v)); }},
                        {"Sin", [](double v) { return std::sin(v); }},
                        {"Cos", [](double v) { return std::cos(v); }},
                        {"Tan", [](double v) { return std::tan(v); }},
                        {"Sinh", [](double v) { return std::sinh(v); }},
                        {"Cosh", [](double v) { return std::cosh(v); }},
                        {"Asin", [](double v) { return std::asin(v); }},
                        {"Acos", [](double v) { return std::acos(v); }},
                        {"Atan", [](double v) { return std::atan(v); }},
                        {"Asinh", [](double v) { return std::asinh(v); }},
                        {"Atanh", [](double v) { return std::atanh(v); }},
                        {"Acosh", [](double v) { return std::acosh(v); }, 2.0f}};
  for (const Case& c : cases) {
    std::vector<float> x = {-0.9f, -0.3f, 0.0f, 0.4f, 0.8f};
    std::vector<double> want;
    for (float& v : x) {
      v += c.offset;
      want.push_back(c.f(v));
    }
    ExpectNear(RunFloat(c.op, x), want, 1e-6, c.op, 1e-6);
  }
}

TEST(CpuUnaryMath, AbsAndSignOfInt64) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto run = [](const std::string& op, const std::vector<int64_t>& x) {
    KernelRunner k;
    const Shape shape = {static_cast<int64_t>(x.size())};
    const int in = k.IntInput(shape, x);
    const int out = k.Output(shape, plan::INT64);
    k.Run(op, {in}, {out});
    return k.Int64s(out);
  };
  // np.abs wraps INT64_MIN to itself.
  EXPECT_THAT(run("Abs", {kMin, -7, 0, 7, kMax}), ElementsAre(kMin, 7, 0, 7, kMax));
  EXPECT_THAT(run("Sign", {kMin, -7, 0, 7, kMax}), ElementsAre(-1, -1, 0, 1, 1));
  EXPECT_THAT(run("Neg", {-7, 0, kMax}), ElementsAre(7, 0, -kMax));
}

TEST(CpuUnaryMath, IsNaNAndIsInfDetectWhatTheirAttributesSay) {
  const std::vector<float> x = {1, -kInf, kNaN, kInf, -0.0f, 3e38f};
  auto run = [&x](const std::string& op, const std::vector<plan::Attribute>& attributes) {
    KernelRunner k;
    const int in = k.Input({6}, x);
    const int out = k.Output({6}, plan::BOOL);
    k.Run(op, {in}, {out}, attributes);
    return k.Bools(out);
  };
  EXPECT_THAT(run("IsNaN", {}), ElementsAre(0, 0, 1, 0, 0, 0));
  EXPECT_THAT(run("IsInf", {}), ElementsAre(0, 1, 0, 1, 0, 0));
  EXPECT_THAT(run("IsInf", {Int("detect_negative", 0)}), ElementsAre(0, 0, 0, 1, 0, 0));
  EXPECT_THAT(run("IsInf", {Int("detect_positive", 0)}), ElementsAre(0, 1, 0, 0, 0, 0));
}

TEST(CpuUnaryMath, RefusesDtypesItLacksNamingWhatItTakes) {
  auto error_of = [](const std::string& op, plan::DType dtype) -> std::string {
    KernelRunner k;
    const int in = dtype == plan::INT64 ? k.IntInput({2}, {1, 2}) : k.BoolInput({2}, {0, 1});
    const int out = k.Output({2}, dtype);
    try {
      k.Run(op, {in}, {out});
    } catch (const Error& error) {
      return error.what();
    }
    return "no error";
  };
  EXPECT_THAT(error_of("Sin", plan::INT64), HasSubstr("has dtype int64, expected float32"));
  EXPECT_THAT(error_of("Floor", plan::INT64), HasSubstr("expected float32"));
  EXPECT_THAT(error_of("Abs", plan::BOOL), HasSubstr("has dtype bool, expected float32 or int64"));
  EXPECT_THAT(error_of("IsNaN", plan::BOOL), HasSubstr("input 0 has dtype bool, expected float32"));
}

}  // namespace
}  // namespace piper::engine::testing
