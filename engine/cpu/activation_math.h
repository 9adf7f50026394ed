// The formulas of ONNX's element-wise unary float ops beyond the basic maps (activations with
// attributes, trigonometric and hyperbolic functions and their inverses, rounding, Sign) and
// of their gradients, one per element, shared by the CPU kernels (activation.cc) and the CUDA
// ones (engine/cuda/activation.cu) so that both backends compute the same values. NaN
// propagates through every forward formula, as in ONNX and PyTorch; the gradients at kinks
// follow PyTorch.
#pragma once

#include <math.h>
#include <stdint.h>

#include "engine/cpu/host_device.h"

namespace piper::engine::cpu {

enum class Activation {
  kAbs,
  kLeakyRelu,
  kSoftplus,
  kElu,
  kSelu,
  kCelu,
  kHardSigmoid,
  kHardSwish,
  kSoftsign,
  kThresholdedRelu,
  kSin,
  kCos,
  kTan,
  kSinh,
  kCosh,
  kAsin,
  kAcos,
  kAtan,
  kAsinh,
  kAcosh,
  kAtanh,
  // Piecewise constant: their gradient is zero (planner/autodiff), so they have no gradient op.
  kFloor,
  kCeil,
  kRound,
  kSign,
};

// The op's float attributes: alpha, and beta (HardSigmoid's beta, Selu's gamma).
struct ActivationParams {
  float alpha = 0.0f;
  float beta = 0.0f;
};

// Whether the gradient reads the forward output Y rather than the input X.
constexpr bool gradient_reads_output(Activation op) {
  return op == Activation::kSoftplus || op == Activation::kTan;
}

// Whether the op also takes int64 tensors (ONNX allows every numeric type; exports compute
// Abs and Sign of integer positions, e.g. T5's relative position buckets).
constexpr bool takes_int64(Activation op) {
  return op == Activation::kAbs || op == Activation::kSign;
}

// max(0, min(1, t)) with NaN kept.
PIPER_HOST_DEVICE inline float clamp_unit(float t) {
  return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
}

PIPER_HOST_DEVICE inline float activation(Activation op, ActivationParams p, float x) {
  switch (op) {
    case Activation::kAbs:
      return fabsf(x);
    case Activation::kLeakyRelu:
      return x < 0.0f ? p.alpha * x : x;
    case Activation::kSoftplus:  // log(1 + e^x) without overflow
      return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
    case Activation::kElu:
      return x > 0.0f ? x : p.alpha * expm1f(x);
    case Activation::kSelu:
      return p.beta * (x > 0.0f ? x : p.alpha * expm1f(x));
    case Activation::kCelu:
      return x > 0.0f ? x : p.alpha * expm1f(x / p.alpha);
    case Activation::kHardSigmoid:
      return clamp_unit(p.alpha * x + p.beta);
    case Activation::kHardSwish:
      return x * clamp_unit(x / 6.0f + 0.5f);
    case Activation::kSoftsign:
      return x / (1.0f + fabsf(x));
    case Activation::kThresholdedRelu:  // x where x > alpha, else 0
      return x <= p.alpha ? 0.0f : x;
    case Activation::kSin:
      return sinf(x);
    case Activation::kCos:
      return cosf(x);
    case Activation::kTan:
      return tanf(x);
    case Activation::kSinh:
      return sinhf(x);
    case Activation::kCosh:
      return coshf(x);
    case Activation::kAsin:
      return asinf(x);
    case Activation::kAcos:
      return acosf(x);
    case Activation::kAtan:
      return atanf(x);
    case Activation::kAsinh:
      return asinhf(x);
    case Activation::kAcosh:
      return acoshf(x);
    case Activation::kAtanh:
      return atanhf(x);
    case Activation::kFloor:
      return floorf(x);
    case Activation::kCeil:
      return ceilf(x);
    case Activation::kRound:  // halves to even: rintf in the default rounding mode
      return rintf(x);
    case Activation::kSign:  // as numpy: 0 for ±0
      return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x == 0.0f ? 0.0f : x));
  }
  return x;
}

// The int64 ops of takes_int64; Abs wraps INT64_MIN to itself, as numpy and PyTorch do.
PIPER_HOST_DEVICE inline int64_t activation(Activation op, int64_t x) {
  if (op == Activation::kSign) return x > 0 ? 1 : (x < 0 ? -1 : 0);
  return x < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x;
}

// dX from dY and the saved tensor s: Y when gradient_reads_output(op), else X.
PIPER_HOST_DEVICE inline float activation_grad(Activation op, ActivationParams p, float dy,
                                               float s) {
  switch (op) {
    case Activation::kAbs:  // 0 at 0
      return s > 0.0f ? dy : (s < 0.0f ? -dy : 0.0f);
    case Activation::kLeakyRelu:  // slope alpha at 0
      return s > 0.0f ? dy : p.alpha * dy;
    case Activation::kSoftplus:  // sigmoid(x) = 1 - e^-y
      return -dy * expm1f(-s);
    case Activation::kElu:
      return s > 0.0f ? dy : dy * p.alpha * expf(s);
    case Activation::kSelu:
      return p.beta * (s > 0.0f ? dy : dy * p.alpha * expf(s));
    case Activation::kCelu:
      return s > 0.0f ? dy : dy * expf(s / p.alpha);
    case Activation::kHardSigmoid: {  // 0 at the kinks
      const float t = p.alpha * s + p.beta;
      return t > 0.0f && t < 1.0f ? p.alpha * dy : 0.0f;
    }
    case Activation::kHardSwish:
      return s < -3.0f ? 0.0f : (s <= 3.0f ? dy * (s / 3.0f + 0.5f) : dy);
    case Activation::kSoftsign: {
      const float d = 1.0f + fabsf(s);
      return dy / (d * d);
    }
    case Activation::kThresholdedRelu:  // 0 at alpha, as PyTorch's threshold
      return s > p.alpha ? dy : 0.0f;
    case Activation::kSin:
      return dy * cosf(s);
    case Activation::kCos:
      return -dy * sinf(s);
    case Activation::kTan:  // 1 + tan² from Y, as PyTorch
      return dy * (1.0f + s * s);
    case Activation::kSinh:
      return dy * coshf(s);
    case Activation::kCosh:
      return dy * sinhf(s);
    case Activation::kAsin:
      return dy / sqrtf(1.0f - s * s);
    case Activation::kAcos:
      return -dy / sqrtf(1.0f - s * s);
    case Activation::kAtan:
      return dy / (1.0f + s * s);
    case Activation::kAsinh:
      return dy / sqrtf(s * s + 1.0f);
    case Activation::kAcosh:
      return dy / sqrtf(s * s - 1.0f);
    case Activation::kAtanh:
      return dy / (1.0f - s * s);
    case Activation::kFloor:
    case Activation::kCeil:
    case Activation::kRound:
    case Activation::kSign:
      return 0.0f;
  }
  return dy;
}

// IsNaN and IsInf: which classes of float values map to true.
struct FloatClass {
  bool nan = false;
  bool positive_infinity = false;
  bool negative_infinity = false;
};

PIPER_HOST_DEVICE inline bool in_class(FloatClass c, float x) {
  return (c.nan && x != x) || (c.positive_infinity && x == INFINITY) ||
         (c.negative_infinity && x == -INFINITY);
}

}  // namespace piper::engine::cpu
