// Launchers of the elementwise kernels (elementwise.cu): maps, broadcasting binary
// ops and comparisons, strided copies (Transpose, Expand, BroadcastTo), Where and
// Cast. Each issues one kernel to `stream` and checks its launch. Float tensors given as
// FloatView may be float32 or bfloat16, each its own; float pointers are float32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/float_view.h"
#include "engine/cuda/strided.h"

namespace piper::engine::cuda {

enum class Element { kFloat32, kBFloat16, kInt64, kBool };

enum class Unary { kNeg, kRelu, kTanh, kSigmoid, kSqrt, kReciprocal, kExp, kLog, kErf, kNot };
// y[i] = f(x[i]) for n elements: float32; kNeg also int64, kNot bool only.
void launch_unary(Unary op, Element type, int64_t n, const void* x, void* y, cudaStream_t stream);

// Gradients from dY and a saved tensor S: the forward output Y, or its input X for kErf.
enum class SavedGrad { kRelu, kTanh, kSigmoid, kSqrt, kReciprocal, kErf };
// dx[i] = f(dy[i], s[i]) for n float32 elements.
void launch_saved_grad(SavedGrad op, int64_t n, const float* dy, const float* s, float* dx,
                       cudaStream_t stream);

enum class Binary {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMax,
  kMin,
  kPRelu,
  kMod,    // ONNX Mod, fmod = 0 (engine/cpu/binary_math.h)
  kFmod,   // ONNX Mod, fmod = 1
  kEqual,  // kEqual and what follows write bool
  kLess,
  kGreater,
  kLessOrEqual,
  kGreaterOrEqual,
  kAnd,  // bool only, as kOr and kXor
  kOr,
  kXor,
};
// out = op(a, b) over `index` (operands out, a, b) for float tensors: kAdd, kSub, kMul, kDiv,
// kMax, kMin, kPRelu (a the input, b its slope), kMod, kFmod. `out` may be `a` when they share
// strides.
void launch_float_binary(Binary op, const StridedIndex& index, FloatView a, FloatView b,
                         FloatView out, cudaStream_t stream);
// The same for int64 (no kDiv); comparisons of float32, int64 or bool and the logic ops of
// bool, writing bool.
void launch_binary(Binary op, Element type, const StridedIndex& index, const void* a, const void* b,
                   void* out, cudaStream_t stream);

// out = scale * in over `index` (operands out, in), float tensors.
void launch_scaled_copy(const StridedIndex& index, FloatView in, FloatView out, float scale,
                        cudaStream_t stream);
// out = in over `index` (operands out, in) for elements of 1, 2, 4 or 8 bytes.
void launch_strided_copy(const StridedIndex& index, size_t element_bytes, const void* in, void* out,
                         cudaStream_t stream);
// out = condition ? x : y over `index` (operands out, condition, x, y), elements of 1, 2, 4 or 8
// bytes.
void launch_where(const StridedIndex& index, size_t element_bytes, const uint8_t* condition,
                  const void* x, const void* y, void* out, cudaStream_t stream);
// The same for float tensors.
void launch_float_where(const StridedIndex& index, const uint8_t* condition, FloatView x,
                        FloatView y, FloatView out, cudaStream_t stream);
// y[i] = x[i] converted as ONNX Cast (see engine/cpu/logical.cc) between different types;
// bfloat16 converts through float32. Float32 shadows of bfloat16 tensors are widened and
// narrowed with it.
void launch_cast(Element from, Element to, int64_t n, const void* x, void* y, cudaStream_t stream);

}  // namespace piper::engine::cuda
