// piper.BiasGelu's and piper.BiasGeluGrad's operands, checked once for every backend
// (engine/cpu/fused_bias_gelu.cc, engine/cuda/fused_ops.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

enum class GeluApproximation { kErf, kTanh };

// Checks the `approximate` attribute ("none" or "tanh"), X (input bias_input − 1, float32)
// and the optional Bias (input bias_input: float32, one value per element of X's last
// dimension); fails naming the operand at fault.
GeluApproximation check_bias_gelu(const KernelArgs& args, const TensorView& x, size_t bias_input);

// y[i] = GELU(x[i]) by the tanh approximation for i in [0, count), on parallel.h's pool,
// rounding as piper.BiasGelu does; y may be x. For piper.MatMul's activation
// (engine/cpu/gemm.cc).
void gelu_tanh_n(const float* x, float* y, int64_t count);

}  // namespace piper::engine::cpu
