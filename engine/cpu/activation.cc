// Activations with attributes: ONNX Abs, LeakyRelu, Softplus, Elu, Selu, Celu, HardSigmoid,
// HardSwish and Clip, and their gradients piper.<Op>Grad (formulas in activation_math.h).
#include "engine/cpu/activation.h"

#include <limits>

#include "engine/cpu/elementwise_map.h"

namespace piper::engine::cpu {
namespace {

KernelFactory activation_factory(Activation op) {
  return [op](const KernelArgs& args) -> std::unique_ptr<PreparedKernel> {
    check_unary(args);
    args.expect_dtype(args.output(0), plan::FLOAT32, "output 0");
    const ActivationParams p = activation_params(op, args.attributes());
    return make_map<float>(args.input(0), args.output(0),
                           [op, p](float x) { return activation(op, p, x); });
  };
}

KernelFactory activation_grad_factory(Activation op) {
  return [op](const KernelArgs& args) {
    const ActivationParams p = activation_params(op, args.attributes());
    return saved_grad_factory([op, p](float dy, float s) { return activation_grad(op, p, dy, s); },
                              gradient_reads_output(op) ? "Y" : "X")(args);
  };
}

// A Clip bound: its one value, or `absent` when the input is omitted; read each run, since a
// bound may be computed.
float clip_bound(const float* bound, float absent) { return bound ? *bound : absent; }

std::unique_ptr<PreparedKernel> clip_factory(const KernelArgs& args) {
  check_clip(args);
  const float* lo = args.has_input(1) ? args.input(1).as<const float>() : nullptr;
  const float* hi = args.has_input(2) ? args.input(2).as<const float>() : nullptr;
  return make_kernel([lo, hi, n = args.output(0).elements(), px = args.input(0).as<const float>(),
                      py = args.output(0).as<float>()](const StepContext&) {
    constexpr float kInfinity = std::numeric_limits<float>::infinity();
    const float low = clip_bound(lo, -kInfinity);
    const float high = clip_bound(hi, kInfinity);
    parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = px[i] < low ? low : px[i];  // NaN stays NaN
        py[i] = v > high ? high : v;
      }
    });
  });
}

// dX = dY where Clip passed X through (X = Y: min <= X <= max, as PyTorch's clamp), else 0.
std::unique_ptr<PreparedKernel> clip_grad_factory(const KernelArgs& args) {
  check_clip_grad(args);
  return make_kernel([n = args.output(0).elements(), pdy = args.input(0).as<const float>(),
                      px = args.input(1).as<const float>(), py = args.input(2).as<const float>(),
                      pdx = args.output(0).as<float>()](const StepContext&) {
    parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) pdx[i] = px[i] == py[i] ? pdy[i] : 0.0f;
    });
  });
}

}  // namespace

const std::vector<ActivationType>& activation_types() {
  static const std::vector<ActivationType> types = {
      {"Abs", "piper.AbsGrad", Activation::kAbs},
      {"LeakyRelu", "piper.LeakyReluGrad", Activation::kLeakyRelu},
      {"Softplus", "piper.SoftplusGrad", Activation::kSoftplus},
      {"Elu", "piper.EluGrad", Activation::kElu},
      {"Selu", "piper.SeluGrad", Activation::kSelu},
      {"Celu", "piper.CeluGrad", Activation::kCelu},
      {"HardSigmoid", "piper.HardSigmoidGrad", Activation::kHardSigmoid},
      {"HardSwish", "piper.HardSwishGrad", Activation::kHardSwish},
  };
  return types;
}

ActivationParams activation_params(Activation op, const Attributes& attributes) {
  auto get = [&attributes](const char* name, double fallback) {
    return static_cast<float>(attributes.get_float(name, fallback));
  };
  switch (op) {
    case Activation::kLeakyRelu:
      return {get("alpha", 0.01), 0.0f};
    case Activation::kElu:
    case Activation::kCelu:
      return {get("alpha", 1.0), 0.0f};
    case Activation::kSelu:
      return {get("alpha", 1.67326319217681884765625), get("gamma", 1.05070102214813232421875)};
    case Activation::kHardSigmoid:
      return {get("alpha", 0.2), get("beta", 0.5)};
    default:
      return {};
  }
}

void check_clip(const KernelArgs& args) {
  args.expect_inputs(1, 3);
  args.expect_outputs(1, 1);
  args.expect_same_shape(args.input(0), "input 0", args.output(0), "output 0");
  args.expect_dtype(args.input(0), plan::FLOAT32, "input 0");
  args.expect_dtype(args.output(0), plan::FLOAT32, "output 0");
  for (size_t i = 1; i < 3; ++i) {
    if (!args.has_input(i)) continue;
    const std::string what = i == 1 ? "min (input 1)" : "max (input 2)";
    args.expect_dtype(args.input(i), plan::FLOAT32, what);
    if (args.input(i).elements() != 1) args.fail(what + " must be a scalar");
  }
}

void check_clip_grad(const KernelArgs& args) {
  args.expect_inputs(3, 3);
  args.expect_outputs(1, 1);
  const TensorView& dx = args.output(0);
  const char* names[] = {"dY (input 0)", "X (input 1)", "Y (input 2)"};
  for (size_t i = 0; i < 3; ++i) {
    args.expect_same_shape(args.input(i), names[i], dx, "dX (output 0)");
    args.expect_dtype(args.input(i), plan::FLOAT32, names[i]);
  }
  args.expect_dtype(dx, plan::FLOAT32, "dX (output 0)");
}

void register_activation_kernels(KernelTable& table) {
  for (const ActivationType& t : activation_types()) {
    table[t.type] = activation_factory(t.activation);
    table[t.gradient] = activation_grad_factory(t.activation);
  }
  table["Clip"] = clip_factory;
  table["piper.ClipGrad"] = clip_grad_factory;
}

}  // namespace piper::engine::cpu
