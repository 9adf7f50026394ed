// ONNX Dropout (opset 13+: data, optional ratio and training_mode inputs; output and optional
// mask) and its gradient piper.DropoutGrad(dY, mask[, ratio[, training_mode]]).
//
// Masks are drawn from a counter-based generator: element i of a Dropout instruction keeps
// its value when hash(run seed, step, instruction, i) ≥ ratio. The instruction is identified
// by its output's index in the plan (and the node's `seed` attribute when the model sets
// one), so a run with the same plan and seed draws the same masks, each microbatch and each
// Dropout its own, and a new mask every step.
#include <cstring>

#include "engine/cpu/kernel_registry.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// SplitMix64's finalizer: a bijective 64-bit mix.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// Ratio and training mode as read at run time from the optional scalar inputs.
struct DropoutMode {
  const float* ratio = nullptr;            // null: 0.5
  const uint8_t* training_mode = nullptr;  // null: false
  bool training() const { return training_mode != nullptr && *training_mode != 0; }
  float probability() const { return ratio != nullptr ? *ratio : 0.5f; }
  // The factor kept elements are scaled by; 1 outside training.
  float scale() const {
    if (!training()) return 1.0f;
    const float p = probability();
    return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  }
};

DropoutMode dropout_mode(const KernelArgs& args, size_t ratio_input) {
  DropoutMode mode;
  if (args.has_input(ratio_input)) {
    const TensorView& ratio = args.input(ratio_input);
    args.expect_dtype(ratio, plan::FLOAT32, "ratio (input " + std::to_string(ratio_input) + ")");
    if (ratio.elements() != 1) {
      args.fail("ratio must be a scalar, got shape " + shape_string(ratio.shape));
    }
    mode.ratio = ratio.as<const float>();
  }
  if (args.has_input(ratio_input + 1)) {
    const TensorView& training = args.input(ratio_input + 1);
    const std::string what = "training_mode (input " + std::to_string(ratio_input + 1) + ")";
    args.expect_dtype(training, plan::BOOL, what);
    if (training.elements() != 1) {
      args.fail(what + " must be a scalar, got shape " + shape_string(training.shape));
    }
    mode.training_mode = training.as<const uint8_t>();
  }
  return mode;
}

std::unique_ptr<PreparedKernel> dropout_factory(const KernelArgs& args) {
  args.expect_inputs(1, 3);
  args.expect_outputs(1, 2);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, plan::FLOAT32, "data (input 0)");
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  args.expect_same_shape(x, "data (input 0)", y, "output 0");
  uint8_t* mask = nullptr;
  if (args.has_output(1)) {
    const TensorView& m = args.output(1);
    args.expect_dtype(m, plan::BOOL, "mask (output 1)");
    args.expect_same_shape(m, "mask (output 1)", x, "data (input 0)");
    mask = m.as<uint8_t>();
  }
  const DropoutMode mode = dropout_mode(args, 1);
  const uint64_t instruction = mix(static_cast<uint64_t>(args.kernel().outputs(0)) * kGolden +
                                   static_cast<uint64_t>(args.attributes().get_int("seed", 0)));
  return make_kernel([mode, instruction, mask, n = x.elements(), px = x.as<const float>(),
                      py = y.as<float>()](const StepContext& context) {
    const float p = mode.probability();
    if (!mode.training() || p == 0.0f) {
      if (py != px) std::memcpy(py, px, static_cast<size_t>(n) * sizeof(float));
      if (mask != nullptr) std::memset(mask, 1, static_cast<size_t>(n));
      return;
    }
    if (p < 0.0f || p > 1.0f) {
      throw Error("Dropout: ratio " + std::to_string(p) + " is outside [0, 1]");
    }
    const float scale = mode.scale();
    const uint64_t key =
        mix(mix(context.seed + kGolden) ^ mix(static_cast<uint64_t>(context.step)) ^ instruction);
    // Keep when the top 24 bits, as a fraction in [0, 1), reach the ratio.
    const auto threshold = static_cast<uint64_t>(static_cast<double>(p) * 16777216.0);
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = (mix(key + static_cast<uint64_t>(i) * kGolden) >> 40) >= threshold;
      py[i] = keep ? px[i] * scale : 0.0f;
      if (mask != nullptr) mask[i] = keep ? 1 : 0;
    }
  });
}

// dX = dY · mask · scale, with scale 1/(1 − ratio) in training mode and 1 otherwise.
std::unique_ptr<PreparedKernel> dropout_grad_factory(const KernelArgs& args) {
  args.expect_inputs(2, 4);
  args.expect_outputs(1, 1);
  const TensorView& dy = args.input(0);
  const TensorView& mask = args.input(1);
  const TensorView& dx = args.output(0);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(mask, plan::BOOL, "mask (input 1)");
  args.expect_dtype(dx, plan::FLOAT32, "dX (output 0)");
  args.expect_same_shape(dy, "dY (input 0)", dx, "dX (output 0)");
  args.expect_same_shape(mask, "mask (input 1)", dx, "dX (output 0)");
  const DropoutMode mode = dropout_mode(args, 2);
  return make_kernel([mode, n = dx.elements(), pdy = dy.as<const float>(),
                      pmask = mask.as<const uint8_t>(), pdx = dx.as<float>()](const StepContext&) {
    const float scale = mode.scale();
    for (int64_t i = 0; i < n; ++i) pdx[i] = pmask[i] != 0 ? pdy[i] * scale : 0.0f;
  });
}

}  // namespace

void register_dropout_kernels(KernelTable& table) {
  table["Dropout"] = dropout_factory;
  table["piper.DropoutGrad"] = dropout_grad_factory;
}

}  // namespace piper::engine::cpu
