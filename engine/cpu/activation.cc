// Element-wise unary ops with shared formulas (activation_math.h): ONNX Abs, LeakyRelu,
// Softplus, Elu, Selu, Celu, HardSigmoid, HardSwish, Softsign, ThresholdedRelu, Sin, Cos, Tan,
// Sinh, Cosh, Asin, Acos, Atan, Asinh, Acosh, Atanh, Floor, Ceil, Round, Sign (Abs and Sign
// also int64), IsNaN, IsInf and Clip, and their gradients piper.<Op>Grad.
#include "engine/cpu/activation.h"

#include <limits>

#include "engine/cpu/elementwise_map.h"

namespace piper::engine::cpu {
namespace {

KernelFactory activation_factory(Activation op) {
  return [op](const KernelArgs& args) -> std::unique_ptr<PreparedKernel> {
    check_activation(op, args);
    if (args.output(0).dtype == plan::INT64) {
      return make_map<int64_t>(args.input(0), args.output(0),
                               [op](int64_t x) { return activation(op, x); });
    }
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

std::unique_ptr<PreparedKernel> float_class_factory(const KernelArgs& args) {
  const FloatClass c = check_float_class(args);
  return make_kernel([c, n = args.output(0).elements(), px = args.input(0).as<const float>(),
                      py = args.output(0).as<uint8_t>()](const StepContext&) {
    parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) py[i] = in_class(c, px[i]) ? 1 : 0;
    });
  });
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
      {"Softsign", "piper.SoftsignGrad", Activation::kSoftsign},
      {"ThresholdedRelu", "piper.ThresholdedReluGrad", Activation::kThresholdedRelu},
      {"Sin", "piper.SinGrad", Activation::kSin},
      {"Cos", "piper.CosGrad", Activation::kCos},
      {"Tan", "piper.TanGrad", Activation::kTan},
      {"Sinh", "piper.SinhGrad", Activation::kSinh},
      {"Cosh", "piper.CoshGrad", Activation::kCosh},
      {"Asin", "piper.AsinGrad", Activation::kAsin},
      {"Acos", "piper.AcosGrad", Activation::kAcos},
      {"Atan", "piper.AtanGrad", Activation::kAtan},
      {"Asinh", "piper.AsinhGrad", Activation::kAsinh},
      {"Acosh", "piper.AcoshGrad", Activation::kAcosh},
      {"Atanh", "piper.AtanhGrad", Activation::kAtanh},
      {"Floor", nullptr, Activation::kFloor},
      {"Ceil", nullptr, Activation::kCeil},
      {"Round", nullptr, Activation::kRound},
      {"Sign", nullptr, Activation::kSign},
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
    case Activation::kThresholdedRelu:
      return {get("alpha", 1.0), 0.0f};
    default:
      return {};
  }
}

void check_activation(Activation op, const KernelArgs& args) {
  check_unary(args);
  const plan::DType dtype = args.output(0).dtype;
  if (dtype == plan::FLOAT32 || (dtype == plan::INT64 && takes_int64(op))) return;
  args.fail("output 0 has dtype " + dtype_name(dtype) + ", expected float32" +
            (takes_int64(op) ? " or int64" : ""));
}

FloatClass check_float_class(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  args.expect_same_shape(args.input(0), "input 0", args.output(0), "output 0");
  args.expect_dtype(args.input(0), plan::FLOAT32, "input 0");
  args.expect_dtype(args.output(0), plan::BOOL, "output 0");
  if (args.op() == "IsNaN") return {true, false, false};
  return {false, args.attributes().get_int("detect_positive", 1) != 0,
          args.attributes().get_int("detect_negative", 1) != 0};
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
    if (t.gradient) table[t.gradient] = activation_grad_factory(t.activation);
  }
  table["IsNaN"] = float_class_factory;
  table["IsInf"] = float_class_factory;
  table["Clip"] = clip_factory;
  table["piper.ClipGrad"] = clip_grad_factory;
}

}  // namespace piper::engine::cpu
