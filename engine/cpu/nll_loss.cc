// ONNX NegativeLogLikelihoodLoss (opset 13+) and its gradient,
// piper.NegativeLogLikelihoodLossGrad. Input [N, C] or [N, C, d1, ...] (log
// probabilities, typically), target [N] or [N, d1, ...] int64, optional
// per-class weights [C]; loss(i, j) = -weight[t] * input[i, t, j] with
// t = target[i, j], 0 where t is ignore_index.
#include <algorithm>

#include "engine/cpu/kernel_registry.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

enum class Reduction { kNone, kSum, kMean };

struct NllGeometry {
  int64_t n = 0, c = 0, d = 1;  // input viewed as [N, C, D]
  Reduction reduction = Reduction::kMean;
  bool has_ignore = false;
  int64_t ignore_index = 0;
  const int64_t* target = nullptr;
  const float* weights = nullptr;  // null: every class weighs 1
  std::string op;

  // The weight of position (i, j)'s target: 0 when ignored; throws for a target out of range.
  float target_weight(int64_t i, int64_t j, int64_t* target_class) const {
    *target_class = target[i * d + j];
    if (has_ignore && *target_class == ignore_index) return 0.0f;
    if (*target_class < 0 || *target_class >= c) {
      throw Error(op + ": target " + std::to_string(*target_class) + " at position " +
                  std::to_string(i * d + j) + " is outside the " + std::to_string(c) +
                  " classes [0, " + std::to_string(c) + ")" +
                  (has_ignore ? " and is not ignore_index " + std::to_string(ignore_index) : "") +
                  "; check the target data");
    }
    return weights ? weights[*target_class] : 1.0f;
  }

  double weight_sum() const {
    double sum = 0.0;
    int64_t t = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < d; ++j) sum += target_weight(i, j, &t);
    }
    return sum;
  }
};

NllGeometry nll_geometry(const KernelArgs& args, const TensorView& input, const TensorView& target,
                         size_t weights_input) {
  args.expect_dtype(input, plan::FLOAT32, "input");
  args.expect_dtype(target, plan::INT64, "target");
  if (input.rank() < 2) {
    args.fail("input must be [N, C] or [N, C, d1, ...], got " + shape_string(input.shape));
  }
  Shape expected = {input.shape[0]};
  expected.insert(expected.end(), input.shape.begin() + 2, input.shape.end());
  if (target.shape != expected) {
    args.fail("target has shape " + shape_string(target.shape) + " but input " +
              shape_string(input.shape) + " needs a target of shape " + shape_string(expected));
  }
  NllGeometry g;
  g.op = args.op();
  g.n = input.shape[0];
  g.c = input.shape[1];
  for (int64_t k = 2; k < input.rank(); ++k) g.d *= input.shape[k];
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
  g.target = target.as<const int64_t>();
  if (args.has_input(weights_input)) {
    const TensorView& w = args.input(weights_input);
    args.expect_dtype(w, plan::FLOAT32, "weight");
    if (w.shape != Shape{g.c}) {
      args.fail("weight has shape " + shape_string(w.shape) + ", expected [" + std::to_string(g.c) +
                "] (one per class)");
    }
    g.weights = w.as<const float>();
  }
  return g;
}

void check_loss_shape(const KernelArgs& args, const NllGeometry& g, const TensorView& loss,
                      const TensorView& target, const std::string& what) {
  args.expect_dtype(loss, plan::FLOAT32, what);
  if (g.reduction == Reduction::kNone ? loss.shape != target.shape : loss.elements() != 1) {
    args.fail(what + " has shape " + shape_string(loss.shape) + ", expected " +
              (g.reduction == Reduction::kNone ? shape_string(target.shape) : "[] (a scalar)"));
  }
}

std::unique_ptr<PreparedKernel> nll_factory(const KernelArgs& args) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 1);
  const TensorView& input = args.input(0);
  const TensorView& target = args.input(1);
  const NllGeometry g = nll_geometry(args, input, target, 2);
  const TensorView& loss = args.output(0);
  check_loss_shape(args, g, loss, target, "loss (output 0)");
  return make_kernel([g, px = input.as<const float>(), out = loss.as<float>()](const StepContext&) {
    double total = 0.0, weight_sum = 0.0;
    for (int64_t i = 0; i < g.n; ++i) {
      for (int64_t j = 0; j < g.d; ++j) {
        int64_t t = 0;
        const float w = g.target_weight(i, j, &t);
        const double value =
            w == 0.0f ? 0.0 : -static_cast<double>(px[(i * g.c + t) * g.d + j]) * w;
        weight_sum += w;
        total += value;
        if (g.reduction == Reduction::kNone) out[i * g.d + j] = static_cast<float>(value);
      }
    }
    if (g.reduction == Reduction::kSum) out[0] = static_cast<float>(total);
    if (g.reduction == Reduction::kMean) out[0] = static_cast<float>(total / weight_sum);
  });
}

// dInput[i, k, j] = -dL(i, j) * w(t) * [k == t]; dL(i, j) is dL[i, j] for none, dL for sum and
// dL / (sum of non-ignored target weights) for mean.
std::unique_ptr<PreparedKernel> nll_grad_factory(const KernelArgs& args) {
  args.expect_inputs(3, 4);
  args.expect_outputs(1, 1);
  const TensorView& dl = args.input(0);
  const TensorView& input = args.input(1);
  const TensorView& target = args.input(2);
  const NllGeometry g = nll_geometry(args, input, target, 3);
  check_loss_shape(args, g, dl, target, "dL (input 0)");
  const TensorView& dinput = args.output(0);
  args.expect_dtype(dinput, plan::FLOAT32, "dInput (output 0)");
  args.expect_same_shape(dinput, "dInput (output 0)", input, "input");
  return make_kernel([g, pdl = dl.as<const float>(), out = dinput.as<float>(),
                      total = dinput.elements()](const StepContext&) {
    const double scale = g.reduction == Reduction::kMean ? 1.0 / g.weight_sum() : 1.0;
    std::fill(out, out + total, 0.0f);
    for (int64_t i = 0; i < g.n; ++i) {
      for (int64_t j = 0; j < g.d; ++j) {
        int64_t t = 0;
        const float w = g.target_weight(i, j, &t);
        if (w == 0.0f) continue;
        const double upstream = g.reduction == Reduction::kNone ? pdl[i * g.d + j] : pdl[0];
        out[(i * g.c + t) * g.d + j] = static_cast<float>(-upstream * scale * w);
      }
    }
  });
}

}  // namespace

void register_nll_loss_kernels(KernelTable& table) {
  table["NegativeLogLikelihoodLoss"] = nll_factory;
  table["piper.NegativeLogLikelihoodLossGrad"] = nll_grad_factory;
}

}  // namespace piper::engine::cpu
