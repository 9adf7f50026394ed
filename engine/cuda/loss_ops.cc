// The class-indexed losses on CUDA, SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss,
// and their gradients, with the CPU kernels' checks (engine/cpu/class_loss.h).
#include "engine/cpu/class_loss.h"
#include "engine/cuda/loss.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {
namespace {

const cpu::ClassLossNames kSoftmaxCrossEntropyNames = {"scores", "labels", "label", "weights"};
const cpu::ClassLossNames kNllNames = {"input", "target", "target", "weight"};

// The loss's geometry, checked as the CPU kernel checks it (`g` receives it); a label out of
// range reports the CPU kernel's message through the context's faults.
ClassLoss class_loss(const KernelArgs& args, CudaContext& context, const TensorView& scores,
                     const TensorView& labels, size_t weights_input,
                     const cpu::ClassLossNames& names, cpu::ClassLossGeometry& g) {
  g = cpu::class_loss_geometry(args, scores, labels, weights_input, names);
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
      [g](int64_t label, int64_t position) { return g.bad_label(label, position); });
  return loss;
}

// Scratch for the loss's sum and mean reductions: 2 · N · D doubles, at least 2.
std::shared_ptr<double> reduction_scratch(const ClassLoss& loss) {
  return device_array<double>(static_cast<size_t>(std::max<int64_t>(2 * loss.n * loss.d, 2)));
}

// A loss's checks: inputs (its input, labels[, weights]) and outputs (the loss, then up to
// `outputs` - 1 more) as the CPU kernel checks them.
ClassLoss checked_loss(const KernelArgs& args, CudaContext& context,
                       const cpu::ClassLossNames& names, size_t outputs) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, outputs);
  cpu::ClassLossGeometry g;
  const ClassLoss loss = class_loss(args, context, args.input(0), args.input(1), 2, names, g);
  cpu::check_loss_shape(args, g, args.output(0), args.input(1), "loss (output 0)");
  return loss;
}

std::unique_ptr<PreparedKernel> sce_factory(const KernelArgs& args, CudaContext& context) {
  const ClassLoss loss = checked_loss(args, context, kSoftmaxCrossEntropyNames, 2);
  float* log_prob = nullptr;
  if (args.has_output(1)) {
    const TensorView& lp = args.output(1);
    args.expect_dtype(lp, plan::FLOAT32, "log_prob (output 1)");
    args.expect_same_shape(lp, "log_prob (output 1)", args.input(0), "scores");
    log_prob = lp.as<float>();
  }
  return make_kernel([&context, loss, scratch = reduction_scratch(loss), log_prob,
                      py = args.output(0).as<float>()](const StepContext&) {
    launch_softmax_cross_entropy(loss, py, log_prob, scratch.get(), context.stream());
  });
}

std::unique_ptr<PreparedKernel> nll_factory(const KernelArgs& args, CudaContext& context) {
  const ClassLoss loss = checked_loss(args, context, kNllNames, 1);
  return make_kernel([&context, loss, scratch = reduction_scratch(loss),
                      py = args.output(0).as<float>()](const StepContext&) {
    launch_nll_loss(loss, py, scratch.get(), context.stream());
  });
}

using GradLauncher = void (*)(const ClassLoss&, const float*, float*, double*, cudaStream_t);

// A loss's gradient: inputs dL, the loss's input, labels[, weights]; output the gradient of the
// input, named `output` in messages.
std::unique_ptr<PreparedKernel> grad_factory(const KernelArgs& args, CudaContext& context,
                                             const cpu::ClassLossNames& names,
                                             const std::string& output, GradLauncher launch) {
  args.expect_inputs(3, 4);
  args.expect_outputs(1, 1);
  const TensorView& dl = args.input(0);
  const TensorView& input = args.input(1);
  const TensorView& labels = args.input(2);
  cpu::ClassLossGeometry g;
  const ClassLoss loss = class_loss(args, context, input, labels, 3, names, g);
  cpu::check_loss_shape(args, g, dl, labels, "dL (input 0)");
  const TensorView& dinput = args.output(0);
  args.expect_dtype(dinput, plan::FLOAT32, output);
  args.expect_same_shape(dinput, output, input, names.input);
  const std::shared_ptr<double> scratch = device_array<double>(1);
  return make_kernel([&context, loss, scratch, launch, pdl = dl.as<const float>(),
                      pdx = dinput.as<float>()](const StepContext&) {
    launch(loss, pdl, pdx, scratch.get(), context.stream());
  });
}

}  // namespace

void register_loss_kernels(CudaKernelTable& table) {
  table["SoftmaxCrossEntropyLoss"] = sce_factory;
  table["piper.SoftmaxCrossEntropyLossGrad"] = [](const KernelArgs& args, CudaContext& context) {
    return grad_factory(args, context, kSoftmaxCrossEntropyNames, "dScores (output 0)",
                        launch_softmax_cross_entropy_grad);
  };
  table["NegativeLogLikelihoodLoss"] = nll_factory;
  table["piper.NegativeLogLikelihoodLossGrad"] = [](const KernelArgs& args, CudaContext& context) {
    return grad_factory(args, context, kNllNames, "dInput (output 0)", launch_nll_loss_grad);
  };
}

}  // namespace piper::engine::cuda
