// Launchers of Pow and its gradients (power.cu), element by element as the CPU kernels
// (engine/cpu/power_math.h). Each issues one kernel to `stream` and checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/strided.h"

namespace piper::engine::cuda {

// y = a ^ b over `index` (operands y, a, b); a and b are int64 when `int_base` and
// `int_exponent`, else float32; y has a's type.
void launch_pow(const StridedIndex& index, bool int_base, bool int_exponent, const void* a,
                const void* b, void* y, cudaStream_t stream);

enum class PowGrad { kBase, kExponent };
// dx = piper.PowBaseGrad(dy, a, b) or piper.PowExponentGrad(dy, a, b = Y) over `index`
// (operands dx, dy, a, b), float32 but b, which is int64 when `int_b` (kBase only).
void launch_pow_grad(PowGrad grad, const StridedIndex& index, bool int_b, const float* dy,
                     const float* a, const void* b, float* dx, cudaStream_t stream);

}  // namespace piper::engine::cuda
