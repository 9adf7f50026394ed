// ONNX SoftmaxCrossEntropyLoss (opset 17) and its gradient,
// piper.SoftmaxCrossEntropyLossGrad. Scores are [N, C] or [N, C, d1, ...], labels
// [N] or [N, d1, ...] int64, optional per-class weights [C].
#include <cmath>
#include <limits>

#include "engine/cpu/kernel_registry.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

enum class Reduction { kNone, kSum, kMean };

// Shapes, attributes and pointers shared by the loss and its gradient.
struct SceGeometry {
  int64_t n = 0, c = 0, d = 1;  // scores viewed as [N, C, D]
  Reduction reduction = Reduction::kMean;
  bool has_ignore = false;
  int64_t ignore_index = 0;
  const float* scores = nullptr;
  const int64_t* labels = nullptr;
  const float* weights = nullptr;  // null: every class weighs 1
  std::string op;

  // The weight of sample (i, j)'s label: 0 when ignored; throws for a label out of range.
  float label_weight(int64_t i, int64_t j, int64_t* label) const {
    *label = labels[i * d + j];
    if (has_ignore && *label == ignore_index) {
      return 0.0f;
    }
    if (*label < 0 || *label >= c) {
      throw Error(op + ": label " + std::to_string(*label) + " at position " +
                  std::to_string(i * d + j) + " is outside the " + std::to_string(c) +
                  " classes [0, " + std::to_string(c) + ")" +
                  (has_ignore ? " and is not ignore_index " + std::to_string(ignore_index) : "") +
                  "; check the labels data");
    }
    return weights ? weights[*label] : 1.0f;
  }

  // log(sum_c exp(scores[i, c, j])), computed stably.
  double log_sum_exp(int64_t i, int64_t j) const {
    const float* x = scores + i * c * d + j;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < c; ++k) max = std::max(max, x[k * d]);
    double sum = 0.0;
    for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(x[k * d] - max));
    return static_cast<double>(max) + std::log(sum);
  }
};

SceGeometry sce_geometry(const KernelArgs& args, const TensorView& scores, const TensorView& labels,
                         size_t weights_input) {
  args.expect_dtype(scores, plan::FLOAT32, "scores");
  args.expect_dtype(labels, plan::INT64, "labels");
  if (scores.rank() < 2) {
    args.fail("scores must be [N, C] or [N, C, d1, ...], got " + shape_string(scores.shape));
  }
  Shape expected_labels = {scores.shape[0]};
  expected_labels.insert(expected_labels.end(), scores.shape.begin() + 2, scores.shape.end());
  if (labels.shape != expected_labels) {
    args.fail("labels have shape " + shape_string(labels.shape) + " but scores " +
              shape_string(scores.shape) + " need labels of shape " +
              shape_string(expected_labels));
  }
  SceGeometry g;
  g.op = args.op();
  g.n = scores.shape[0];
  g.c = scores.shape[1];
  for (int64_t k = 2; k < scores.rank(); ++k) g.d *= scores.shape[k];
  const std::string reduction = args.attributes().get_string("reduction", "mean");
  if (reduction == "none") {
    g.reduction = Reduction::kNone;
  } else if (reduction == "sum") {
    g.reduction = Reduction::kSum;
  } else if (reduction == "mean") {
    g.reduction = Reduction::kMean;
  } else {
    args.fail("reduction '" + reduction + "' is not one of none, sum, mean");
  }
  g.has_ignore = args.attributes().has("ignore_index");
  g.ignore_index = args.attributes().get_int("ignore_index", 0);
  g.scores = scores.as<const float>();
  g.labels = labels.as<const int64_t>();
  if (args.has_input(weights_input)) {
    const TensorView& w = args.input(weights_input);
    args.expect_dtype(w, plan::FLOAT32, "weights");
    if (w.shape != Shape{g.c}) {
      args.fail("weights have shape " + shape_string(w.shape) + ", expected [" +
                std::to_string(g.c) + "] (one per class)");
    }
    g.weights = w.as<const float>();
  }
  return g;
}

// The loss output's shape for a reduction: labels' shape for none, a scalar otherwise.
void check_loss_shape(const KernelArgs& args, const SceGeometry& g, const TensorView& loss,
                      const TensorView& labels, const std::string& what) {
  args.expect_dtype(loss, plan::FLOAT32, what);
  if (g.reduction == Reduction::kNone ? loss.shape != labels.shape : loss.elements() != 1) {
    args.fail(what + " has shape " + shape_string(loss.shape) + ", expected " +
              (g.reduction == Reduction::kNone ? shape_string(labels.shape) : "[] (a scalar)"));
  }
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
    double total = 0.0;
    double weight_sum = 0.0;
    for (int64_t i = 0; i < g.n; ++i) {
      for (int64_t j = 0; j < g.d; ++j) {
        const double lse = g.log_sum_exp(i, j);
        const float* x = g.scores + i * g.c * g.d + j;
        if (log_prob != nullptr) {
          float* lp = log_prob + i * g.c * g.d + j;
          for (int64_t k = 0; k < g.c; ++k) lp[k * g.d] = static_cast<float>(x[k * g.d] - lse);
        }
        int64_t label = 0;
        const float w = g.label_weight(i, j, &label);
        const double value = w == 0.0f ? 0.0 : -(x[label * g.d] - lse) * w;
        weight_sum += w;
        total += value;
        if (g.reduction == Reduction::kNone) out[i * g.d + j] = static_cast<float>(value);
      }
    }
    if (g.reduction == Reduction::kSum) out[0] = static_cast<float>(total);
    if (g.reduction == Reduction::kMean) out[0] = static_cast<float>(total / weight_sum);
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
        if (g.reduction == Reduction::kMean) {
          double weight_sum = 0.0;
          int64_t label = 0;
          for (int64_t i = 0; i < g.n; ++i) {
            for (int64_t j = 0; j < g.d; ++j) weight_sum += g.label_weight(i, j, &label);
          }
          scale = 1.0 / weight_sum;
        }
        for (int64_t i = 0; i < g.n; ++i) {
          for (int64_t j = 0; j < g.d; ++j) {
            const float* x = g.scores + i * g.c * g.d + j;
            float* dx = out + i * g.c * g.d + j;
            int64_t label = 0;
            const float w = g.label_weight(i, j, &label);
            if (w == 0.0f) {
              for (int64_t k = 0; k < g.c; ++k) dx[k * g.d] = 0.0f;
              continue;
            }
            const double upstream = g.reduction == Reduction::kNone ? pdl[i * g.d + j] : pdl[0];
            const double factor = upstream * scale * w;
            const double lse = g.log_sum_exp(i, j);
            for (int64_t k = 0; k < g.c; ++k) {
              const double p = std::exp(static_cast<double>(x[k * g.d]) - lse);
              dx[k * g.d] = static_cast<float>(factor * (p - (k == label ? 1.0 : 0.0)));
            }
          }
        }
      });
}

}  // namespace

void register_loss_kernels(KernelTable& table) {
  table["SoftmaxCrossEntropyLoss"] = sce_factory;
  table["piper.SoftmaxCrossEntropyLossGrad"] = sce_grad_factory;
}

}  // namespace piper::engine::cpu
