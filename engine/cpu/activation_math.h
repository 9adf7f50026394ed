// The formulas of ONNX's activations with attributes and of their gradients, one per
// element, shared by the CPU kernels (activation.cc) and the CUDA ones
// (engine/cuda/activation.cu) so that both backends compute the same values. NaN
// propagates through every forward formula, as in ONNX and PyTorch; the gradients at kinks
// follow PyTorch.
#pragma once

#include <math.h>

#include "engine/cpu/host_device.h"

namespace piper::engine::cpu {

enum class Activation { kAbs, kLeakyRelu, kSoftplus, kElu, kSelu, kCelu, kHardSigmoid, kHardSwish };

// The op's float attributes: alpha, and beta (HardSigmoid's beta, Selu's gamma).
struct ActivationParams {
  float alpha = 0.0f;
  float beta = 0.0f;
};

// Whether the gradient reads the forward output Y rather than the input X.
constexpr bool gradient_reads_output(Activation op) { return op == Activation::kSoftplus; }

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
  }
  return x;
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
  }
  return dy;
}

}  // namespace piper::engine::cpu
