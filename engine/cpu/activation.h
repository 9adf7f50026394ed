// ONNX's element-wise unary ops of activation_math.h, IsNaN, IsInf and Clip, as both backends
// register them: the op types, their gradient ops, the attributes they read and their checks.
#pragma once

#include <string>
#include <vector>

#include "engine/cpu/activation_math.h"
#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

struct ActivationType {
  const char* type;      // the ONNX op, e.g. "LeakyRelu"
  const char* gradient;  // its gradient op, e.g. "piper.LeakyReluGrad"; null for Floor,
                         // Ceil, Round and Sign, whose gradient is zero
  Activation activation;
};

const std::vector<ActivationType>& activation_types();

// The op's alpha and beta with ONNX's defaults; a gradient op carries its forward op's
// attributes.
ActivationParams activation_params(Activation op, const Attributes& attributes);

// One input and one output of the same shape, float32 (or int64 where takes_int64(op)).
void check_activation(Activation op, const KernelArgs& args);

// IsNaN's and IsInf's operands (float32 X, bool Y of its shape) and what the op detects: NaN,
// or the infinities IsInf's detect_positive and detect_negative (default 1) select.
FloatClass check_float_class(const KernelArgs& args);

// Clip's operands: X, the optional scalar bounds min and max (inputs 1 and 2), Y, all float32.
void check_clip(const KernelArgs& args);
// piper.ClipGrad's operands: dY, X, Y, dX, all float32 of one shape.
void check_clip_grad(const KernelArgs& args);

}  // namespace piper::engine::cpu
