// piper.SGD and piper.AdamW against torch.optim's update rules written out in double,
// over three steps with changing gradients, with and without a learning-rate schedule and
// gradient clipping (LambdaLR's factors and clip_grad_norm_'s scale written out per step); the
// gradient norm that skips a step; and piper.SumSquares against a sum in double.
#include <gmock/gmock.h>

#include <array>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 3;
constexpr int64_t kSize = 6;

std::vector<float> Gradient(int step) { return TestValues(kSize, 100 + step); }

// A schedule and clipping bound as update attributes, with what they do at each of the kSteps
// steps: the learning-rate factor f(s) (s 0-based) and, for the gradient norm fed at that
// step, the scale clip_grad_norm_ applies.
struct Recipe {
  std::vector<plan::Attribute> attributes;
  std::vector<float> norms;  // empty: no norm input
  std::array<double, kSteps> factor = {1, 1, 1};
  std::array<double, kSteps> scale = {1, 1, 1};
};

const Recipe kPlain;

// Linear decay to 0.2 after one warm-up step, over 4 steps: f = 0, 1, 0.2 + 0.8 · (1 − 1/3).
// Clipping at 1 with norms 0.5 (unclipped), 4 and 2.
Recipe LinearWarmupClipped() {
  return Recipe{{Str("lr_schedule", "linear"), Int("warmup_steps", 1), Int("total_steps", 4),
                 Float("min_lr_ratio", 0.2), Float("clip_grad_norm", 1.0)},
                {0.5f, 4.0f, 2.0f},
                {0.0, 1.0, 0.2 + 0.8 * (2.0 / 3.0)},
                {1.0, 1.0 / (4.0 + 1e-6), 1.0 / (2.0 + 1e-6)}};
}

// Cosine without warm-up over 2 steps, floor 0.1: f = 1, 0.1 + 0.9 · ½(1 + cos π/2), 0.1.
Recipe Cosine() {
  return Recipe{{Str("lr_schedule", "cosine"), Int("total_steps", 2), Float("min_lr_ratio", 0.1)},
                {1.0f, 1.0f, 1.0f},
                {1.0, 0.1 + 0.9 * 0.5, 0.1}};
}

// The kernel's inputs: `inputs`, then the recipe's norm when it has one (returned, or -1).
int AddNorm(KernelRunner& r, const Recipe& recipe, std::vector<int>& inputs) {
  if (recipe.norms.empty()) return -1;
  inputs.push_back(r.Input({}, {recipe.norms[0]}));
  return inputs.back();
}

std::vector<plan::Attribute> With(std::vector<plan::Attribute> attributes, const Recipe& recipe) {
  attributes.insert(attributes.end(), recipe.attributes.begin(), recipe.attributes.end());
  return attributes;
}

struct SgdCase {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

void CheckSgd(const SgdCase& c, const Recipe& recipe = kPlain) {
  const std::vector<float> p0 = TestValues(kSize, 7);
  KernelRunner r;
  const int p = r.Input({2, 3}, p0);
  const int g = r.Input({2, 3}, Gradient(1));
  const bool has_buffer = c.momentum != 0;
  const int m = has_buffer ? r.Output({2, 3}) : KernelRunner::kOmitted;
  std::vector<int> inputs = has_buffer ? std::vector<int>{p, g, m} : std::vector<int>{p, g};
  const int n = AddNorm(r, recipe, inputs);
  auto kernel = r.Prepare(
      "piper.SGD", inputs, {},
      With({Float("lr", c.lr), Float("momentum", c.momentum), Float("dampening", c.dampening),
            Float("weight_decay", c.weight_decay), Int("nesterov", c.nesterov)},
           recipe));
  std::vector<double> param(p0.begin(), p0.end()), buf(kSize, 0.0);
  for (int step = 1; step <= kSteps; ++step) {
    const auto grad = Gradient(step);
    r.Set(g, grad);
    if (n >= 0) r.Set(n, {recipe.norms[step - 1]});
    kernel->run(StepContext{step, 0, step});
    const double lr = c.lr * recipe.factor[step - 1];
    for (int64_t i = 0; i < kSize; ++i) {
      double d = grad[i] * recipe.scale[step - 1] + c.weight_decay * param[i];
      if (c.momentum != 0) {
        buf[i] = step == 1 ? d : c.momentum * buf[i] + (1 - c.dampening) * d;
        d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
      }
      param[i] -= lr * d;
    }
    const std::string label = "SGD step " + std::to_string(step);
    ExpectNear(r.Floats(p), param, 1e-6, label + " parameter");
    if (has_buffer) ExpectNear(r.Floats(m), buf, 1e-6, label + " momentum buffer");
  }
}

TEST(OptimizerKernels, SgdPlain) { CheckSgd({0.1, 0, 0, 0, false}); }
TEST(OptimizerKernels, SgdWeightDecay) { CheckSgd({0.1, 0, 0, 0.01, false}); }
TEST(OptimizerKernels, SgdMomentumDampening) { CheckSgd({0.05, 0.9, 0.3, 0, false}); }
TEST(OptimizerKernels, SgdNesterovWeightDecay) { CheckSgd({0.05, 0.8, 0, 0.02, true}); }
TEST(OptimizerKernels, SgdLinearWarmupClipped) {
  CheckSgd({0.05, 0.8, 0, 0.02, true}, LinearWarmupClipped());
}
TEST(OptimizerKernels, SgdCosine) { CheckSgd({0.1, 0, 0, 0, false}, Cosine()); }

void CheckAdamW(const Recipe& recipe) {
  const double base_lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.1;
  const std::vector<float> p0 = TestValues(kSize, 8);
  KernelRunner r;
  const int p = r.Input({kSize}, p0);
  const int g = r.Input({kSize}, Gradient(1));
  const int m = r.Output({kSize});
  const int v = r.Output({kSize});
  std::vector<int> inputs = {p, g, m, v};
  const int n = AddNorm(r, recipe, inputs);
  auto kernel = r.Prepare("piper.AdamW", inputs, {},
                          With({Float("lr", base_lr), Float("beta1", b1), Float("beta2", b2),
                                Float("eps", eps), Float("weight_decay", wd)},
                               recipe));
  std::vector<double> param(p0.begin(), p0.end()), mm(kSize, 0.0), vv(kSize, 0.0);
  for (int step = 1; step <= kSteps; ++step) {
    const auto grad = Gradient(step);
    r.Set(g, grad);
    if (n >= 0) r.Set(n, {recipe.norms[step - 1]});
    kernel->run(StepContext{step, 0, step});
    const double lr = base_lr * recipe.factor[step - 1];
    for (int64_t i = 0; i < kSize; ++i) {
      const double gi = grad[i] * recipe.scale[step - 1];
      param[i] *= 1 - lr * wd;
      mm[i] = b1 * mm[i] + (1 - b1) * gi;
      vv[i] = b2 * vv[i] + (1 - b2) * gi * gi;
      const double step_size = lr / (1 - std::pow(b1, step));
      const double denom = std::sqrt(vv[i]) / std::sqrt(1 - std::pow(b2, step)) + eps;
      param[i] -= step_size * mm[i] / denom;
    }
    const std::string label = "AdamW step " + std::to_string(step);
    ExpectNear(r.Floats(p), param, 1e-6, label + " parameter");
    ExpectNear(r.Floats(m), mm, 1e-7, label + " first moment");
    ExpectNear(r.Floats(v), vv, 1e-7, label + " second moment");
  }
}

TEST(OptimizerKernels, AdamW) { CheckAdamW(kPlain); }
TEST(OptimizerKernels, AdamWLinearWarmupClipped) { CheckAdamW(LinearWarmupClipped()); }
TEST(OptimizerKernels, AdamWCosine) { CheckAdamW(Cosine()); }

// The schedule follows the training step (StepContext::step), as LambdaLR follows
// scheduler.step() calls; the optimizer step number only drives bias correction and momentum.
TEST(OptimizerKernels, TheScheduleFollowsTheTrainingStep) {
  KernelRunner r;
  const std::vector<float> p0 = TestValues(kSize, 9);
  const int p = r.Input({kSize}, p0);
  const int g = r.Input({kSize}, std::vector<float>(kSize, 1.0f));
  auto kernel =
      r.Prepare("piper.SGD", {p, g}, {},
                {Float("lr", 0.5), Str("lr_schedule", "constant"), Int("warmup_steps", 4)});
  kernel->run(StepContext{4, 0, 1});  // s = 3: f = 3/4
  const std::vector<float> got = r.Floats(p);
  for (int64_t i = 0; i < kSize; ++i) EXPECT_FLOAT_EQ(got[i], p0[i] - 0.5f * 0.75f) << i;
}

TEST(OptimizerKernels, RejectsABadScheduleOrClippingWithoutANorm) {
  KernelRunner r;
  const int p = r.Input({2}, {1, 2});
  const int g = r.Input({2}, {1, 2});
  const auto error = [&](std::vector<plan::Attribute> attributes) -> std::string {
    try {
      r.Prepare("piper.SGD", {p, g}, {}, std::move(attributes));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(error({Float("lr", 0.1), Str("lr_schedule", "step")}),
              HasSubstr("attribute lr_schedule: unknown schedule \"step\""));
  EXPECT_THAT(error({Float("lr", 0.1), Str("lr_schedule", "cosine")}),
              HasSubstr("attribute total_steps: required for type \"cosine\""));
  EXPECT_THAT(error({Float("lr", 0.1), Float("clip_grad_norm", 1.0)}),
              HasSubstr("clip_grad_norm needs the global gradient norm N as the last input"));
}

TEST(OptimizerKernels, SgdRejectsNesterovWithDampening) {
  KernelRunner r;
  const int p = r.Input({2}, {1, 2});
  const int g = r.Input({2}, {1, 2});
  const int m = r.Output({2});
  try {
    r.Prepare(
        "piper.SGD", {p, g, m}, {},
        {Float("lr", 0.1), Float("momentum", 0.9), Float("dampening", 0.1), Int("nesterov", 1)});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Nesterov momentum requires"));
  }
}

TEST(OptimizerKernels, RejectsMissingLrAndMismatchedState) {
  KernelRunner r;
  const int p = r.Input({2}, {1, 2});
  const int g = r.Input({2}, {1, 2});
  const int m = r.Output({3});
  try {
    r.Prepare("piper.SGD", {p, g}, {});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("piper.SGD: required attribute 'lr' is missing"));
  }
  EXPECT_THROW(r.Prepare("piper.AdamW", {p, g, m, m}, {}, {Float("lr", 0.1)}), Error);
  EXPECT_THROW(r.Prepare("piper.SGD", {p, g}, {}, {Float("lr", 0.1), Float("momentum", 0.9)}),
               Error);
}

// A non-finite norm leaves parameter and state as they were; a finite one updates as without
// a norm, and the optimizer step number (bias correction) is StepContext::update.
TEST(OptimizerKernels, AdamWSkipsTheUpdateWhenTheGradientNormIsNotFinite) {
  const std::vector<float> p0 = TestValues(kSize, 8);
  const std::vector<plan::Attribute> attributes = {Float("lr", 0.1), Float("weight_decay", 0.1)};
  KernelRunner gated, plain;
  const int p = gated.Input({kSize}, p0);
  const int g = gated.Input({kSize}, Gradient(1));
  const int m = gated.Output({kSize});
  const int v = gated.Output({kSize});
  const int n = gated.Input({}, {1.0f});
  plain.Input({kSize}, p0);
  plain.Input({kSize}, Gradient(1));
  plain.Output({kSize});
  plain.Output({kSize});
  auto with_norm = gated.Prepare("piper.AdamW", {p, g, m, v, n}, {}, attributes);
  auto without = plain.Prepare("piper.AdamW", {p, g, m, v}, {}, attributes);
  with_norm->run(StepContext{1, 0, 1});
  without->run(StepContext{1, 0, 1});
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    gated.Set(n, {bad});
    const auto before = {gated.Floats(p), gated.Floats(m), gated.Floats(v)};
    with_norm->run(StepContext{2, 0, 2});
    const auto after = {gated.Floats(p), gated.Floats(m), gated.Floats(v)};
    EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin())) << bad;
  }
  gated.Set(n, {3.0f});
  with_norm->run(StepContext{5, 0, 2});
  without->run(StepContext{2, 0, 2});
  for (int t : {p, m, v}) EXPECT_EQ(gated.Floats(t), plain.Floats(t)) << "tensor " << t;
}

TEST(OptimizerKernels, SgdReadsTheNormAfterItsState) {
  for (const bool momentum : {false, true}) {
    KernelRunner r;
    const std::vector<float> p0 = TestValues(kSize, 9);
    const int p = r.Input({kSize}, p0);
    const int g = r.Input({kSize}, Gradient(1));
    std::vector<int> inputs = {p, g};
    if (momentum) inputs.push_back(r.Output({kSize}));
    const int n = r.Input({}, {std::nanf("")});
    inputs.push_back(n);
    auto kernel = r.Prepare("piper.SGD", inputs, {},
                            {Float("lr", 0.1), Float("momentum", momentum ? 0.9 : 0.0)});
    kernel->run(StepContext{1, 0, 1});
    EXPECT_EQ(r.Floats(p), p0) << "momentum " << momentum;
    r.Set(n, {2.0f});
    kernel->run(StepContext{1, 0, 1});
    EXPECT_NE(r.Floats(p), p0) << "momentum " << momentum;
  }
}

TEST(OptimizerKernels, RejectsANormThatIsNotAScalar) {
  KernelRunner r;
  const int p = r.Input({2}, {1, 2});
  const int g = r.Input({2}, {1, 2});
  try {
    r.Prepare("piper.SGD", {p, g, g}, {}, {Float("lr", 0.1)});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("the gradient norm N (input 2) must be a scalar"));
  }
}

TEST(SumSquares, AddsTheSquaresOfEverySliceInDouble) {
  KernelRunner r;
  const int64_t big = 200000;  // several blocks of partial sums
  const std::vector<float> a = TestValues(big, 3), b = TestValues(21, 4);
  const int x0 = r.Input({big}, a);
  const int x1 = r.Input({7, 3}, b);
  const int y = r.Output({});
  r.Run("piper.SumSquares", {x0, x1}, {y}, {Ints("starts", {5, 20}), Ints("counts", {big - 9, 1})});
  double expected = static_cast<double>(b[20]) * b[20];
  for (int64_t i = 5; i < big - 4; ++i) expected += static_cast<double>(a[i]) * a[i];
  ExpectNear(r.Floats(y), {expected}, 0.0, "sum of squares", 1e-7);
  EXPECT_THROW(r.Run("piper.SumSquares", {x0}, {y}, {Ints("starts", {1}), Ints("counts", {big})}),
               Error);
  EXPECT_THROW(r.Run("piper.SumSquares", {x0, x1}, {y}, {Ints("starts", {0}), Ints("counts", {1})}),
               Error);
}

}  // namespace
}  // namespace piper::engine::testing
