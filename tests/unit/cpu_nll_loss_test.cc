// NegativeLogLikelihoodLoss (ONNX opset 13+) and piper.NegativeLogLikelihoodLossGrad,
// against hand-computed values.
#include <gmock/gmock.h>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// input [2, 3] (N = 2, C = 3), targets 2 and 0.
constexpr float kInput[] = {-1, -2, -3, -4, -5, -6};

TEST(CpuNllLoss, Reductions) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {std::begin(kInput), std::end(kInput)});
  const int t = r.IntInput({2}, {2, 0});
  const int none = r.Output({2});
  r.Run("NegativeLogLikelihoodLoss", {x, t}, {none}, {Str("reduction", "none")});
  EXPECT_THAT(r.Floats(none), ElementsAre(3, 4));
  const int sum = r.Output({});
  r.Run("NegativeLogLikelihoodLoss", {x, t}, {sum}, {Str("reduction", "sum")});
  EXPECT_THAT(r.Floats(sum), ElementsAre(7));
  const int mean = r.Output({});
  r.Run("NegativeLogLikelihoodLoss", {x, t}, {mean});
  EXPECT_THAT(r.Floats(mean), ElementsAre(3.5));
}

TEST(CpuNllLoss, WeightsAndIgnoreIndex) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {std::begin(kInput), std::end(kInput)});
  const int t = r.IntInput({2}, {2, 0});
  const int w = r.Input({3}, {0.5, 1, 2});
  const int mean = r.Output({});
  r.Run("NegativeLogLikelihoodLoss", {x, t, w}, {mean});
  // (3 * 2 + 4 * 0.5) / (2 + 0.5)
  ExpectNear(r.Floats(mean), {8.0 / 2.5}, 1e-6, "weighted mean");
  r.Run("NegativeLogLikelihoodLoss", {x, t, w}, {mean}, {Int("ignore_index", 0)});
  ExpectNear(r.Floats(mean), {3.0}, 1e-6, "weighted mean, target 0 ignored");
}

TEST(CpuNllLoss, SpatialDimensions) {
  KernelRunner r;
  // input [1, 2, 2]: N = 1, C = 2, d1 = 2; targets [1, 0].
  const int x = r.Input({1, 2, 2}, {-1, -2, -3, -4});
  const int t = r.IntInput({1, 2}, {1, 0});
  const int none = r.Output({1, 2});
  r.Run("NegativeLogLikelihoodLoss", {x, t}, {none}, {Str("reduction", "none")});
  EXPECT_THAT(r.Floats(none), ElementsAre(3, 2));
}

TEST(CpuNllLoss, GradientPerReduction) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {std::begin(kInput), std::end(kInput)});
  const int t = r.IntInput({2}, {2, -1});
  const int w = r.Input({3}, {0.5, 1, 2});
  const int dl = r.Input({}, {3});
  const int dx = r.Output({2, 3});
  r.Set(dx, std::vector<float>(6, 9));
  r.Run("piper.NegativeLogLikelihoodLossGrad", {dl, x, t, w}, {dx}, {Int("ignore_index", -1)});
  // Mean over the one non-ignored weight (2): d/dx[0, 2] = -3 * 2 / 2.
  EXPECT_THAT(r.Floats(dx), ElementsAre(0, 0, -3, 0, 0, 0));
  const int dl_none = r.Input({2}, {1, 2});
  const int t2 = r.IntInput({2}, {1, 0});
  r.Run("piper.NegativeLogLikelihoodLossGrad", {dl_none, x, t2}, {dx}, {Str("reduction", "none")});
  EXPECT_THAT(r.Floats(dx), ElementsAre(0, -1, 0, -2, 0, 0));
}

TEST(CpuNllLoss, RejectsTargetOutOfRange) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {std::begin(kInput), std::end(kInput)});
  const int t = r.IntInput({2}, {3, 0});
  const int loss = r.Output({});
  try {
    r.Run("NegativeLogLikelihoodLoss", {x, t}, {loss});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("NegativeLogLikelihoodLoss: target 3 at position 0"));
  }
}

}  // namespace
}  // namespace piper::engine::testing
