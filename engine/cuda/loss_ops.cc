// SoftmaxCrossEntropyLoss and piper.SoftmaxCrossEntropyLossGrad on CUDA, with the CPU
// kernels' checks (engine/cpu/class_loss.h).
#include "engine/cpu/class_loss.h"
#include "engine/cuda/loss.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {
namespace {

// The loss's geometry, checked as the CPU kernel checks it (`g` receives it).
ClassLoss class_loss(const KernelArgs& args, CudaContext& context, const TensorView& scores,
                     const TensorView& labels, size_t weights_input, cpu::ClassLossGeometry& g) {
  g = cpu::class_loss_geometry(args, scores, labels, weights_input,
                               {"scores", "labels", "label", "weights"});
  ClassLoss loss;
  loss.n = g.n;
  loss.c = g.c;
  loss.d = g.d;
  loss.reduction = g.reduction == cpu::Reduction::kNone  ? LossReduction::kNone
                   : g.reduction == cpu::Reduction::kSum ? LossReduction::kSum
                                                         : LossReduction::kMean;
  loss.has_ignore = g.has_ignore;
  loss.ignore_index = g.ignore_index;
  loss.scores = scores.as<const float>();
  loss.labels = g.labels;
  loss.weights = g.weights;
  loss.fault = context.device_fault();
  loss.fault_code = context.fault_code(
      args.op() + ": label",
      "is outside the " + std::to_string(g.c) + " classes [0, " + std::to_string(g.c) + ")" +
          (g.has_ignore ? " and is not ignore_index " + std::to_string(g.ignore_index) : "") +
          "; check the label data");
  return loss;
}

std::unique_ptr<PreparedKernel> sce_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 2);
  const TensorView& scores = args.input(0);
  const TensorView& labels = args.input(1);
  cpu::ClassLossGeometry g;
  const ClassLoss loss = class_loss(args, context, scores, labels, 2, g);
  const TensorView& out = args.output(0);
  cpu::check_loss_shape(args, g, out, labels, "loss (output 0)");
  float* log_prob = nullptr;
  if (args.has_output(1)) {
    const TensorView& lp = args.output(1);
    args.expect_dtype(lp, plan::FLOAT32, "log_prob (output 1)");
    args.expect_same_shape(lp, "log_prob (output 1)", scores, "scores");
    log_prob = lp.as<float>();
  }
  const std::shared_ptr<double> scratch =
      device_array<double>(static_cast<size_t>(std::max<int64_t>(2 * loss.n * loss.d, 2)));
  return make_kernel([&context, loss, scratch, log_prob, py = out.as<float>()](const StepContext&) {
    launch_softmax_cross_entropy(loss, py, log_prob, scratch.get(), context.stream());
  });
}

std::unique_ptr<PreparedKernel> sce_grad_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(3, 4);
  args.expect_outputs(1, 1);
  const TensorView& dl = args.input(0);
  const TensorView& scores = args.input(1);
  const TensorView& labels = args.input(2);
  cpu::ClassLossGeometry g;
  const ClassLoss loss = class_loss(args, context, scores, labels, 3, g);
  cpu::check_loss_shape(args, g, dl, labels, "dL (input 0)");
  const TensorView& dscores = args.output(0);
  args.expect_dtype(dscores, plan::FLOAT32, "dScores (output 0)");
  args.expect_same_shape(dscores, "dScores (output 0)", scores, "scores");
  const std::shared_ptr<double> scratch = device_array<double>(1);
  return make_kernel([&context, loss, scratch, pdl = dl.as<const float>(),
                      pdx = dscores.as<float>()](const StepContext&) {
    launch_softmax_cross_entropy_grad(loss, pdl, pdx, scratch.get(), context.stream());
  });
}

}  // namespace

void register_loss_kernels(CudaKernelTable& table) {
  table["SoftmaxCrossEntropyLoss"] = sce_factory;
  table["piper.SoftmaxCrossEntropyLossGrad"] = sce_grad_factory;
}

}  // namespace piper::engine::cuda
