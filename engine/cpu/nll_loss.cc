// ONNX NegativeLogLikelihoodLoss (opset 13+) and its gradient,
// piper.NegativeLogLikelihoodLossGrad. Input [N, C] or [N, C, d1, ...] (log
// probabilities, typically), target [N] or [N, d1, ...] int64, optional
// per-class weights [C]; loss(i, j) = -weight[t] * input[i, t, j] with
// t = target[i, j], 0 where t is ignore_index.
#include <algorithm>

#include "engine/cpu/class_loss.h"

namespace piper::engine::cpu {
namespace {

ClassLossGeometry nll_geometry(const KernelArgs& args, const TensorView& input,
                               const TensorView& target, size_t weights_input) {
  return class_loss_geometry(args, input, target, weights_input,
                             {"input", "target", "target", "weight"});
}

std::unique_ptr<PreparedKernel> nll_factory(const KernelArgs& args) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 1);
  const TensorView& input = args.input(0);
  const TensorView& target = args.input(1);
  const ClassLossGeometry g = nll_geometry(args, input, target, 2);
  const TensorView& loss = args.output(0);
  check_loss_shape(args, g, loss, target, "loss (output 0)");
  return make_kernel([g, px = input.as<const float>(), out = loss.as<float>()](const StepContext&) {
    const LossSums sums = sum_positions(g, [&](int64_t i, int64_t j, double* weight, float*) {
      int64_t t = 0;
      const float w = g.label_weight(i, j, &t);
      const double value = w == 0.0f ? 0.0 : -static_cast<double>(px[(i * g.c + t) * g.d + j]) * w;
      *weight = w;
      if (g.reduction == Reduction::kNone) out[i * g.d + j] = static_cast<float>(value);
      return value;
    });
    if (g.reduction == Reduction::kSum) out[0] = static_cast<float>(sums.loss);
    if (g.reduction == Reduction::kMean) out[0] = static_cast<float>(sums.loss / sums.weight);
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
  const ClassLossGeometry g = nll_geometry(args, input, target, 3);
  check_loss_shape(args, g, dl, target, "dL (input 0)");
  const TensorView& dinput = args.output(0);
  args.expect_dtype(dinput, plan::FLOAT32, "dInput (output 0)");
  args.expect_same_shape(dinput, "dInput (output 0)", input, "input");
  return make_kernel([g, pdl = dl.as<const float>(), out = dinput.as<float>(),
                      total = dinput.elements()](const StepContext&) {
    const double scale = g.reduction == Reduction::kMean ? 1.0 / g.weight_sum() : 1.0;
    parallel_for(total, kParallelGrain,
                 [&](int64_t begin, int64_t end) { std::fill(out + begin, out + end, 0.0f); });
    for (int64_t i = 0; i < g.n; ++i) {
      for (int64_t j = 0; j < g.d; ++j) {
        int64_t t = 0;
        const float w = g.label_weight(i, j, &t);
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
