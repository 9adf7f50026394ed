// SoftmaxCrossEntropyLoss (ONNX opset 17) and piper.SoftmaxCrossEntropyLossGrad.
#include <gmock/gmock.h>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kIgnore = -100;

// The ONNX reference semantics, in double: per-position losses (0 where ignored), their
// weights, and log_prob; scores viewed as [N, C, D].
struct SceReference {
  std::vector<double> losses, weights, log_prob;

  SceReference(const std::vector<float>& scores, int64_t n, int64_t c, int64_t d,
               const std::vector<int64_t>& labels, const std::vector<float>* class_weights,
               bool use_ignore) {
    log_prob.resize(scores.size());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < d; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) sum += std::exp(scores[(i * c + k) * d + j]);
        for (int64_t k = 0; k < c; ++k) {
          log_prob[(i * c + k) * d + j] = scores[(i * c + k) * d + j] - std::log(sum);
        }
        const int64_t label = labels[i * d + j];
        const bool ignored = use_ignore && label == kIgnore;
        const double w = ignored ? 0.0 : class_weights ? (*class_weights)[label] : 1.0;
        weights.push_back(w);
        losses.push_back(ignored ? 0.0 : -log_prob[(i * c + label) * d + j] * w);
      }
    }
  }
  double sum() const {
    double total = 0;
    for (double v : losses) total += v;
    return total;
  }
  double mean() const {
    double w = 0;
    for (double v : weights) w += v;
    return sum() / w;
  }
};

TEST(CpuLoss, HandComputedMeanLoss) {
  KernelRunner r;
  const int scores = r.Input({2, 3}, {1, 2, 3, 0, 0, 0});
  const int labels = r.IntInput({2}, {2, 1});
  const int loss = r.Output({});
  r.Run("SoftmaxCrossEntropyLoss", {scores, labels}, {loss});
  // (log(e + e^2 + e^3) - 3 + log 3) / 2
  ExpectNear(r.Floats(loss), {(0.40760596444 + 1.09861228867) / 2}, 1e-6, "mean loss");
}

TEST(CpuLoss, ReductionsWithLogProb) {
  const int64_t n = 4, c = 5;
  const auto sv = TestValues(n * c, 21);
  const std::vector<int64_t> lv = {0, 4, 2, 2};
  const SceReference ref(sv, n, c, 1, lv, nullptr, false);
  for (const char* reduction : {"none", "sum", "mean"}) {
    KernelRunner r;
    const int scores = r.Input({n, c}, sv);
    const int labels = r.IntInput({n}, lv);
    const bool none = std::string(reduction) == "none";
    const int loss = r.Output(none ? Shape{n} : Shape{});
    const int log_prob = r.Output({n, c});
    r.Run("SoftmaxCrossEntropyLoss", {scores, labels}, {loss, log_prob},
          {Str("reduction", reduction)});
    const std::vector<double> expected =
        none ? ref.losses : std::vector<double>{reduction[0] == 's' ? ref.sum() : ref.mean()};
    ExpectNear(r.Floats(loss), expected, 1e-6, std::string("loss ") + reduction, 1e-6);
    ExpectNear(r.Floats(log_prob), ref.log_prob, 1e-6, "log_prob", 1e-6);
  }
}

TEST(CpuLoss, IgnoreIndexAndWeightsInMean) {
  const int64_t n = 5, c = 3;
  const auto sv = TestValues(n * c, 22);
  const std::vector<int64_t> lv = {0, kIgnore, 2, 1, kIgnore};
  const std::vector<float> wv = {0.5f, 2.0f, 1.5f};
  for (bool weighted : {false, true}) {
    KernelRunner r;
    const int scores = r.Input({n, c}, sv);
    const int labels = r.IntInput({n}, lv);
    const int weights = weighted ? r.Input({c}, wv) : KernelRunner::kOmitted;
    const int loss = r.Output({});
    r.Run("SoftmaxCrossEntropyLoss", {scores, labels, weights}, {loss},
          {Int("ignore_index", kIgnore)});
    const SceReference ref(sv, n, c, 1, lv, weighted ? &wv : nullptr, true);
    // Mean divides by the weights of the non-ignored labels: 3 without weights.
    ExpectNear(r.Floats(loss), {ref.mean()}, 1e-6, weighted ? "weighted mean" : "mean", 1e-6);
  }
}

TEST(CpuLoss, SpatialScoresWithWeightsNone) {
  const int64_t n = 2, c = 3, d1 = 2, d2 = 2;
  const auto sv = TestValues(n * c * d1 * d2, 23);
  const std::vector<int64_t> lv = {0, 1, 2, kIgnore, 2, 2, 0, 1};
  const std::vector<float> wv = {1.0f, 0.25f, 3.0f};
  KernelRunner r;
  const int scores = r.Input({n, c, d1, d2}, sv);
  const int labels = r.IntInput({n, d1, d2}, lv);
  const int weights = r.Input({c}, wv);
  const int none = r.Output({n, d1, d2});
  const int mean = r.Output({});
  const SceReference ref(sv, n, c, d1 * d2, lv, &wv, true);
  r.Run("SoftmaxCrossEntropyLoss", {scores, labels, weights}, {none},
        {Str("reduction", "none"), Int("ignore_index", kIgnore)});
  r.Run("SoftmaxCrossEntropyLoss", {scores, labels, weights}, {mean},
        {Int("ignore_index", kIgnore)});
  ExpectNear(r.Floats(none), ref.losses, 1e-6, "none", 1e-6);
  ExpectNear(r.Floats(mean), {ref.mean()}, 1e-6, "mean", 1e-6);
}

TEST(CpuLoss, LabelOutOfRangeFailsAtRun) {
  KernelRunner r;
  const int scores = r.Input({2, 3}, TestValues(6));
  const int labels = r.IntInput({2}, {1, 3});
  const int loss = r.Output({});
  auto kernel = r.Prepare("SoftmaxCrossEntropyLoss", {scores, labels}, {loss});
  try {
    kernel->run(StepContext{});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("label 3 at position 1 is outside the 3 classes"));
  }
}

TEST(CpuLoss, RejectsMismatchedLabelsAndReduction) {
  KernelRunner r;
  const int scores = r.Input({2, 3}, TestValues(6));
  const int labels = r.IntInput({3}, {0, 1, 2});
  const int good_labels = r.IntInput({2}, {0, 1});
  const int loss = r.Output({});
  EXPECT_THROW(r.Prepare("SoftmaxCrossEntropyLoss", {scores, labels}, {loss}), Error);
  EXPECT_THROW(r.Prepare("SoftmaxCrossEntropyLoss", {scores, good_labels}, {loss},
                         {Str("reduction", "max")}),
               Error);
  EXPECT_THROW(r.Prepare("SoftmaxCrossEntropyLoss", {scores, good_labels}, {loss},
                         {Str("reduction", "none")}),
               Error);
}

// The gradient kernel against central finite differences of the forward kernel, for every
// reduction, with weights, ignore_index and a spatial dimension.
TEST(CpuLoss, GradientMatchesFiniteDifferences) {
  const int64_t n = 3, c = 4, d = 2;
  const auto sv = TestValues(n * c * d, 24);
  const std::vector<int64_t> lv = {0, 3, kIgnore, 1, 2, 2};
  const std::vector<float> wv = {0.5f, 1.0f, 2.0f, 1.5f};
  for (const char* reduction : {"none", "sum", "mean"}) {
    for (bool weighted : {false, true}) {
      const bool none = std::string(reduction) == "none";
      const Shape loss_shape = none ? Shape{n, d} : Shape{};
      const std::vector<float> dl_values = none ? TestValues(n * d, 25) : std::vector<float>{0.7f};
      const std::vector<plan::Attribute> attributes = {Str("reduction", reduction),
                                                       Int("ignore_index", kIgnore)};
      KernelRunner r;
      const int scores = r.Input({n, c, d}, sv);
      const int labels = r.IntInput({n, d}, lv);
      const int weights = weighted ? r.Input({c}, wv) : KernelRunner::kOmitted;
      const int dl = r.Input(loss_shape, dl_values);
      const int loss = r.Output(loss_shape);
      const int grad = r.Output({n, c, d});
      r.Run("piper.SoftmaxCrossEntropyLossGrad", {dl, scores, labels, weights}, {grad}, attributes);
      auto forward =
          r.Prepare("SoftmaxCrossEntropyLoss", {scores, labels, weights}, {loss}, attributes);
      // J(scores) = sum(dL * loss(scores)).
      auto objective = [&](const std::vector<float>& s) {
        r.Set(scores, s);
        forward->run(StepContext{});
        const auto values = r.Floats(loss);
        double j = 0;
        for (size_t i = 0; i < values.size(); ++i) j += dl_values[i] * values[i];
        return j;
      };
      std::vector<double> numeric;
      const float h = 1e-2f;
      for (size_t i = 0; i < sv.size(); ++i) {
        auto plus = sv, minus = sv;
        plus[i] += h;
        minus[i] -= h;
        numeric.push_back((objective(plus) - objective(minus)) / (plus[i] - minus[i]));
      }
      ExpectNear(r.Floats(grad), numeric, 2e-4,
                 std::string("dScores reduction=") + reduction + (weighted ? " weighted" : ""));
    }
  }
}

}  // namespace
}  // namespace piper::engine::testing
