// ONNX's activations with attributes (activation_math.h) and Clip, as both backends register
// them: the op types, their gradient ops and the attributes they read.
#pragma once

#include <string>
#include <vector>

#include "engine/cpu/activation_math.h"
#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

struct ActivationType {
  const char* type;      // the ONNX op, e.g. "LeakyRelu"
  const char* gradient;  // its gradient op, e.g. "piper.LeakyReluGrad"
  Activation activation;
};

const std::vector<ActivationType>& activation_types();

// The op's alpha and beta with ONNX's defaults; a gradient op carries its forward op's
// attributes.
ActivationParams activation_params(Activation op, const Attributes& attributes);

// Clip's operands: X, the optional scalar bounds min and max (inputs 1 and 2), Y, all float32.
void check_clip(const KernelArgs& args);
// piper.ClipGrad's operands: dY, X, Y, dX, all float32 of one shape.
void check_clip_grad(const KernelArgs& args);

}  // namespace piper::engine::cpu
