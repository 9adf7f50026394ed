// Launchers of the elementwise kernels (elementwise.cu): maps, broadcasting binary
// ops and comparisons, strided copies (Transpose, Expand, BroadcastTo), Where and
// Cast. Each issues one kernel to `stream` and checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/strided.h"

namespace piper::engine::cuda {

enum class Element { kFloat32, kInt64, kBool };

enum class Unary { kNeg, kRelu, kTanh, kSigmoid, kSqrt, kReciprocal, kExp, kLog, kErf, kNot };
// y[i] = f(x[i]) for n elements: float32; kNeg also int64, kNot bool only.
void launch_unary(Unary op, Element type, int64_t n, const void* x, void* y, cudaStream_t stream);

// Gradients from dY and a saved tensor S: the forward output Y, or its input X for kErf.
enum class SavedGrad { kRelu, kTanh, kSigmoid, kSqrt, kReciprocal, kErf };
// dx[i] = f(dy[i], s[i]) for n float32 elements.
void launch_saved_grad(SavedGrad op, int64_t n, const float* dy, const float* s, float* dx,
                       cudaStream_t stream);

enum class Binary { kAdd, kSub, kMul, kDiv, kMax, kMin, kEqual, kLess, kGreater };
// out = op(a, b) over `index` (operands out, a, b): float32 or int64 (kDiv float32 only),
// comparisons also bool, writing bool. `out` may be `a` when they share strides.
void launch_binary(Binary op, Element type, const StridedIndex& index, const void* a, const void* b,
                   void* out, cudaStream_t stream);

// out = scale * in over `index` (operands out, in), float32.
void launch_scaled_copy(const StridedIndex& index, const float* in, float* out, float scale,
                        cudaStream_t stream);
// out = in over `index` (operands out, in) for elements of 1, 4 or 8 bytes.
void launch_strided_copy(const StridedIndex& index, size_t element_bytes, const void* in, void* out,
                         cudaStream_t stream);
// out = condition ? x : y over `index` (operands out, condition, x, y).
void launch_where(const StridedIndex& index, size_t element_bytes, const uint8_t* condition,
                  const void* x, const void* y, void* out, cudaStream_t stream);
// y[i] = x[i] converted as ONNX Cast (see engine/cpu/logical.cc) between different types.
void launch_cast(Element from, Element to, int64_t n, const void* x, void* y, cudaStream_t stream);

}  // namespace piper::engine::cuda
