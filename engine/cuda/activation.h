// Launchers of the activation kernels (activation.cu): ONNX's element-wise unary ops of
// engine/cpu/activation_math.h (formulas shared with the CPU), IsNaN, IsInf, Clip and their
// gradients. Each issues one kernel to `stream` and checks its launch; tensors have n
// elements, float32 unless said otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cpu/activation_math.h"

namespace piper::engine::cuda {

using cpu::Activation;
using cpu::ActivationParams;
using cpu::FloatClass;

// y[i] = activation(op, p, x[i]).
void launch_activation(Activation op, ActivationParams p, int64_t n, const float* x, float* y,
                       cudaStream_t stream);
// The same for int64 tensors, for the ops of cpu::takes_int64.
void launch_activation(Activation op, int64_t n, const int64_t* x, int64_t* y, cudaStream_t stream);
// y[i] = in_class(c, x[i]), y bool.
void launch_float_class(FloatClass c, int64_t n, const float* x, uint8_t* y, cudaStream_t stream);
// dx[i] = activation_grad(op, p, dy[i], s[i]), s the saved X or Y.
void launch_activation_grad(Activation op, ActivationParams p, int64_t n, const float* dy,
                            const float* s, float* dx, cudaStream_t stream);
// y[i] = min(max(x[i], *lo), *hi), NaN kept; a null bound is absent. The bounds are device
// scalars, read by the kernel.
void launch_clip(int64_t n, const float* x, const float* lo, const float* hi, float* y,
                 cudaStream_t stream);
// dx[i] = x[i] == y[i] ? dy[i] : 0.
void launch_clip_grad(int64_t n, const float* dy, const float* x, const float* y, float* dx,
                      cudaStream_t stream);

}  // namespace piper::engine::cuda
