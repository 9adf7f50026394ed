// ONNX SoftmaxCrossEntropyLoss (opset 17) and its gradient,
// piper.SoftmaxCrossEntropyLossGrad. Scores are [N, C] or [N, C, d1, ...], labels
// [N] or [N, d1, ...] int64, optional per-class weights [C].
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/class_loss.h"
#include "engine/cpu/vector_math.h"

namespace piper::engine::cpu {
namespace {

// The shared geometry plus the scores, for the softmax.
struct SceGeometry : ClassLossGeometry {
  const float* scores = nullptr;

  // Writes e[k] = exp(scores[i, k, j] − max) for every class k (max over the classes) and
  // returns max and Σ_k e[k], summed in double: log Σ_k exp(scores[i, k, j]) = max + log Σ.
  struct Exps {
    double max = 0.0, sum = 0.0;
    double log_sum_exp() const { return max + std::log(sum); }
  };
  Exps softmax_exps(int64_t i, int64_t j, float* e) const {
    const float* x = scores + i * c * d + j;
    if (d == 1) return contiguous_exps(x, e);
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < c; ++k) max = std::max(max, x[k * d]);
    for (int64_t k = 0; k < c; ++k) e[k] = x[k * d] - max;
    exp_n(e, e, c);
    double sum = 0.0;
    for (int64_t k = 0; k < c; ++k) sum += e[k];
    return {max, sum};
  }

  // softmax_exps for classes stored contiguously (D = 1; [N, C] scores), with the maximum and
  // the sum kept in eight lanes so that the loops vectorise.
  Exps contiguous_exps(const float* x, float* e) const {
    constexpr int kLanes = 8;
    float lane_max[kLanes];
    std::fill(lane_max, lane_max + kLanes, -std::numeric_limits<float>::infinity());
    const int64_t whole = c / kLanes * kLanes;
    for (int64_t k = 0; k < whole; k += kLanes) {
      for (int l = 0; l < kLanes; ++l) lane_max[l] = std::max(lane_max[l], x[k + l]);
    }
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t k = whole; k < c; ++k) max = std::max(max, x[k]);
    for (float m : lane_max) max = std::max(max, m);
    for (int64_t k = 0; k < c; ++k) e[k] = x[k] - max;
    exp_n(e, e, c);
    double lane_sum[kLanes] = {};
    for (int64_t k = 0; k < whole; k += kLanes) {
      for (int l = 0; l < kLanes; ++l) lane_sum[l] += e[k + l];
    }
    double sum = 0.0;
    for (int64_t k = whole; k < c; ++k) sum += e[k];
    for (double part : lane_sum) sum += part;
    return {max, sum};
  }
};

SceGeometry sce_geometry(const KernelArgs& args, const TensorView& scores, const TensorView& labels,
                         size_t weights_input) {
  SceGeometry g;
  static_cast<ClassLossGeometry&>(g) = class_loss_geometry(
      args, scores, labels, weights_input, {"scores", "labels", "label", "weights"});
  g.scores = scores.as<const float>();
  return g;
}

std::unique_ptr<PreparedKernel> sce_factory(const KernelArgs& args) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 2);
  const TensorView& scores = args.input(0);
  const TensorView& labels = args.input(1);
  const SceGeometry g = sce_geometry(args, scores, labels, 2);
  const TensorView& loss = args.output(0);
  check_loss_shape(args, g, loss, labels, "loss (output 0)");
  float* log_prob = nullptr;
  if (args.has_output(1)) {
    const TensorView& lp = args.output(1);
    args.expect_dtype(lp, plan::FLOAT32, "log_prob (output 1)");
    args.expect_same_shape(lp, "log_prob (output 1)", scores, "scores");
    log_prob = lp.as<float>();
  }
  return make_kernel([g, log_prob, out = loss.as<float>()](const StepContext&) {
    const LossSums sums = sum_positions(g, [&](int64_t i, int64_t j, double* weight, float* e) {
      const double lse = g.softmax_exps(i, j, e).log_sum_exp();
      const float* x = g.scores + i * g.c * g.d + j;
      if (log_prob != nullptr) {
        float* lp = log_prob + i * g.c * g.d + j;
        for (int64_t k = 0; k < g.c; ++k) lp[k * g.d] = static_cast<float>(x[k * g.d] - lse);
      }
      int64_t label = 0;
      const float w = g.label_weight(i, j, &label);
      const double value = w == 0.0f ? 0.0 : -(x[label * g.d] - lse) * w;
      *weight = w;
      if (g.reduction == Reduction::kNone) out[i * g.d + j] = static_cast<float>(value);
      return value;
    });
    if (g.reduction == Reduction::kSum) out[0] = static_cast<float>(sums.loss);
    if (g.reduction == Reduction::kMean) out[0] = static_cast<float>(sums.loss / sums.weight);
  });
}

// dScores[i, k, j] = dL(i, j) * w(label) * (softmax[i, k, j] - [k == label]); dL(i, j) is
// dL[i, j] for none, dL for sum and dL / (sum of non-ignored label weights) for mean.
std::unique_ptr<PreparedKernel> sce_grad_factory(const KernelArgs& args) {
  args.expect_inputs(3, 4);
  args.expect_outputs(1, 1);
  const TensorView& dl = args.input(0);
  const TensorView& scores = args.input(1);
  const TensorView& labels = args.input(2);
  const SceGeometry g = sce_geometry(args, scores, labels, 3);
  check_loss_shape(args, g, dl, labels, "dL (input 0)");
  const TensorView& dscores = args.output(0);
  args.expect_dtype(dscores, plan::FLOAT32, "dScores (output 0)");
  args.expect_same_shape(dscores, "dScores (output 0)", scores, "scores");
  return make_kernel(
      [g, pdl = dl.as<const float>(), out = dscores.as<float>()](const StepContext&) {
        double scale = 1.0;
        if (g.reduction == Reduction::kMean) scale = 1.0 / g.weight_sum();
        for_each_position(g, [&](int64_t i, int64_t j, float* e) {
          float* dx = out + i * g.c * g.d + j;
          int64_t label = 0;
          const float w = g.label_weight(i, j, &label);
          if (w == 0.0f) {
            for (int64_t k = 0; k < g.c; ++k) dx[k * g.d] = 0.0f;
            return;
          }
          const double upstream = g.reduction == Reduction::kNone ? pdl[i * g.d + j] : pdl[0];
          const double factor = upstream * scale * w;
          const double inv_sum = 1.0 / g.softmax_exps(i, j, e).sum;
          if (g.d == 1) {  // contiguous: the same values, in a loop that vectorises
            for (int64_t k = 0; k < g.c; ++k) dx[k] = static_cast<float>(factor * (e[k] * inv_sum));
            dx[label] = static_cast<float>(factor * (e[label] * inv_sum - 1.0));
            return;
          }
          for (int64_t k = 0; k < g.c; ++k) {
            const double p = e[k] * inv_sum;
            dx[k * g.d] = static_cast<float>(factor * (p - (k == label ? 1.0 : 0.0)));
          }
        });
      });
}

}  // namespace

void register_loss_kernels(KernelTable& table) {
  table["SoftmaxCrossEntropyLoss"] = sce_factory;
  table["piper.SoftmaxCrossEntropyLossGrad"] = sce_grad_factory;
}

}  // namespace piper::engine::cpu
