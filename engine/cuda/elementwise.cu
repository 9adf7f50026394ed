// Elementwise kernels: one thread per output element in grid-stride loops.
//   map            y[i] = f(x[i])                      unary ops, contiguous
//   map2           dx[i] = f(dy[i], s[i])             saved-tensor gradients, contiguous
//   binary         out = op(a, b) with broadcasting    strided offsets per element
//   strided copy   transposes and broadcasts           strided offsets per element
#include <type_traits>

#include "engine/cuda/device.cuh"
#include "engine/cuda/elementwise.h"

namespace piper::engine::cuda {
namespace {

template <typename T, typename F>
__global__ void map_kernel(int64_t n, const T* x, T* y, F f) {
  PIPER_GRID_STRIDE_LOOP(i, n) { y[i] = f(x[i]); }
}

template <typename F>
__global__ void map2_kernel(int64_t n, const float* a, const float* b, float* y, F f) {
  PIPER_GRID_STRIDE_LOOP(i, n) { y[i] = f(a[i], b[i]); }
}

template <typename T, typename U, typename F>
__global__ void binary_kernel(StridedIndex index, const T* a, const T* b, U* out, F f) {
  int64_t offsets[3];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, offsets);
    out[offsets[0]] = f(a[offsets[1]], b[offsets[2]]);
  }
}

template <typename T>
__global__ void copy_kernel(StridedIndex index, const T* in, T* out) {
  int64_t offsets[2];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, offsets);
    out[offsets[0]] = in[offsets[1]];
  }
}

__global__ void scaled_copy_kernel(StridedIndex index, const float* in, float* out, float scale) {
  int64_t offsets[2];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, offsets);
    out[offsets[0]] = scale * in[offsets[1]];
  }
}

template <typename T>
__global__ void where_kernel(StridedIndex index, const uint8_t* condition, const T* x, const T* y,
                             T* out) {
  int64_t offsets[4];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, offsets);
    out[offsets[0]] = condition[offsets[1]] ? x[offsets[2]] : y[offsets[3]];
  }
}

template <typename From, typename To>
__global__ void cast_kernel(int64_t n, const From* x, To* y) {
  PIPER_GRID_STRIDE_LOOP(i, n) {
    const From v = x[i];
    if constexpr (std::is_same_v<To, uint8_t>) {
      y[i] = v != From(0) ? 1 : 0;
    } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, int64_t>) {
      constexpr float kLimit = 9223372036854775808.0f;  // 2^63; NaN and beyond give INT64_MIN
      y[i] = v >= -kLimit && v < kLimit ? static_cast<int64_t>(v) : INT64_MIN;
    } else {
      y[i] = static_cast<To>(v);
    }
  }
}

template <typename T, typename F>
void map(int64_t n, const void* x, void* y, F f, cudaStream_t stream) {
  if (n == 0) return;
  map_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, static_cast<const T*>(x),
                                                     static_cast<T*>(y), f);
  PIPER_CUDA_LAUNCH_CHECK("map_kernel");
}

template <typename F>
void map2(int64_t n, const float* a, const float* b, float* y, F f, cudaStream_t stream) {
  if (n == 0) return;
  map2_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, a, b, y, f);
  PIPER_CUDA_LAUNCH_CHECK("map2_kernel");
}

template <typename T, typename U, typename F>
void binary(const StridedIndex& index, const void* a, const void* b, void* out, F f,
            cudaStream_t stream) {
  if (index.total == 0) return;
  binary_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(
      index, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<U*>(out), f);
  PIPER_CUDA_LAUNCH_CHECK("binary_kernel");
}

// Arithmetic for T in {float, int64}; NaN propagates through Max and Min, as in PyTorch.
template <typename T>
void arithmetic(Binary op, const StridedIndex& index, const void* a, const void* b, void* out,
                cudaStream_t stream) {
  switch (op) {
    case Binary::kAdd:
      return binary<T, T>(
          index, a, b, out, [] __device__(T x, T y) { return x + y; }, stream);
    case Binary::kSub:
      return binary<T, T>(
          index, a, b, out, [] __device__(T x, T y) { return x - y; }, stream);
    case Binary::kMul:
      return binary<T, T>(
          index, a, b, out, [] __device__(T x, T y) { return x * y; }, stream);
    case Binary::kDiv:
      return binary<T, T>(
          index, a, b, out, [] __device__(T x, T y) { return x / y; }, stream);
    case Binary::kMax:
      return binary<T, T>(
          index, a, b, out, [] __device__(T x, T y) { return y != y || y > x ? y : x; }, stream);
    case Binary::kMin:
      return binary<T, T>(
          index, a, b, out, [] __device__(T x, T y) { return y != y || y < x ? y : x; }, stream);
    default:
      break;
  }
}

template <typename T>
void comparison(Binary op, const StridedIndex& index, const void* a, const void* b, void* out,
                cudaStream_t stream) {
  switch (op) {
    case Binary::kEqual:
      return binary<T, uint8_t>(
          index, a, b, out, [] __device__(T x, T y) -> uint8_t { return x == y; }, stream);
    case Binary::kLess:
      return binary<T, uint8_t>(
          index, a, b, out, [] __device__(T x, T y) -> uint8_t { return x < y; }, stream);
    case Binary::kGreater:
      return binary<T, uint8_t>(
          index, a, b, out, [] __device__(T x, T y) -> uint8_t { return x > y; }, stream);
    default:
      break;
  }
}

template <typename From>
void cast_from(Element to, int64_t n, const void* x, void* y, cudaStream_t stream) {
  const auto* in = static_cast<const From*>(x);
  const unsigned int blocks = blocks_for(n);
  switch (to) {
    case Element::kFloat32:
      cast_kernel<<<blocks, kThreads, 0, stream>>>(n, in, static_cast<float*>(y));
      break;
    case Element::kInt64:
      cast_kernel<<<blocks, kThreads, 0, stream>>>(n, in, static_cast<int64_t*>(y));
      break;
    case Element::kBool:
      cast_kernel<<<blocks, kThreads, 0, stream>>>(n, in, static_cast<uint8_t*>(y));
      break;
  }
  PIPER_CUDA_LAUNCH_CHECK("cast_kernel");
}

}  // namespace

void launch_unary(Unary op, Element type, int64_t n, const void* x, void* y, cudaStream_t stream) {
  if (type == Element::kInt64) {
    return map<int64_t>(
        n, x, y, [] __device__(int64_t v) { return -v; }, stream);
  }
  if (type == Element::kBool) {
    return map<uint8_t>(
        n, x, y, [] __device__(uint8_t v) -> uint8_t { return v == 0; }, stream);
  }
  switch (op) {
    case Unary::kNeg:
      return map<float>(
          n, x, y, [] __device__(float v) { return -v; }, stream);
    case Unary::kRelu:  // NaN propagates, as in ONNX and PyTorch
      return map<float>(
          n, x, y, [] __device__(float v) { return v < 0.0f ? 0.0f : v; }, stream);
    case Unary::kTanh:
      return map<float>(
          n, x, y, [] __device__(float v) { return tanhf(v); }, stream);
    case Unary::kSigmoid:
      return map<float>(
          n, x, y,
          [] __device__(float v) {
            if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
            const float e = expf(v);
            return e / (1.0f + e);
          },
          stream);
    case Unary::kSqrt:
      return map<float>(
          n, x, y, [] __device__(float v) { return sqrtf(v); }, stream);
    case Unary::kReciprocal:
      return map<float>(
          n, x, y, [] __device__(float v) { return 1.0f / v; }, stream);
    case Unary::kExp:
      return map<float>(
          n, x, y, [] __device__(float v) { return expf(v); }, stream);
    case Unary::kLog:
      return map<float>(
          n, x, y, [] __device__(float v) { return logf(v); }, stream);
    case Unary::kErf:
      return map<float>(
          n, x, y, [] __device__(float v) { return erff(v); }, stream);
    case Unary::kNot:
      break;
  }
}

void launch_saved_grad(SavedGrad op, int64_t n, const float* dy, const float* s, float* dx,
                       cudaStream_t stream) {
  switch (op) {
    case SavedGrad::kRelu:
      return map2(
          n, dy, s, dx, [] __device__(float g, float y) { return y > 0.0f ? g : 0.0f; }, stream);
    case SavedGrad::kTanh:
      return map2(
          n, dy, s, dx, [] __device__(float g, float y) { return g * (1.0f - y * y); }, stream);
    case SavedGrad::kSigmoid:
      return map2(
          n, dy, s, dx, [] __device__(float g, float y) { return g * y * (1.0f - y); }, stream);
    case SavedGrad::kSqrt:
      return map2(
          n, dy, s, dx, [] __device__(float g, float y) { return g * 0.5f / y; }, stream);
    case SavedGrad::kReciprocal:
      return map2(
          n, dy, s, dx, [] __device__(float g, float y) { return -g * y * y; }, stream);
    case SavedGrad::kErf:
      return map2(
          n, dy, s, dx,
          [] __device__(float g, float x) {
            constexpr float kTwoOverSqrtPi = 1.1283791670955126f;
            return g * kTwoOverSqrtPi * expf(-x * x);
          },
          stream);
  }
}

void launch_binary(Binary op, Element type, const StridedIndex& index, const void* a, const void* b,
                   void* out, cudaStream_t stream) {
  const bool compare = op == Binary::kEqual || op == Binary::kLess || op == Binary::kGreater;
  switch (type) {
    case Element::kFloat32:
      return compare ? comparison<float>(op, index, a, b, out, stream)
                     : arithmetic<float>(op, index, a, b, out, stream);
    case Element::kInt64:
      return compare ? comparison<int64_t>(op, index, a, b, out, stream)
                     : arithmetic<int64_t>(op, index, a, b, out, stream);
    case Element::kBool:
      return comparison<uint8_t>(op, index, a, b, out, stream);
  }
}

void launch_scaled_copy(const StridedIndex& index, const float* in, float* out, float scale,
                        cudaStream_t stream) {
  if (index.total == 0) return;
  scaled_copy_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(index, in, out, scale);
  PIPER_CUDA_LAUNCH_CHECK("scaled_copy_kernel");
}

void launch_strided_copy(const StridedIndex& index, size_t element_bytes, const void* in, void* out,
                         cudaStream_t stream) {
  if (index.total == 0) return;
  const unsigned int blocks = blocks_for(index.total);
  switch (element_bytes) {
    case 8:
      copy_kernel<<<blocks, kThreads, 0, stream>>>(index, static_cast<const uint64_t*>(in),
                                                   static_cast<uint64_t*>(out));
      break;
    case 4:
      copy_kernel<<<blocks, kThreads, 0, stream>>>(index, static_cast<const uint32_t*>(in),
                                                   static_cast<uint32_t*>(out));
      break;
    default:
      copy_kernel<<<blocks, kThreads, 0, stream>>>(index, static_cast<const uint8_t*>(in),
                                                   static_cast<uint8_t*>(out));
      break;
  }
  PIPER_CUDA_LAUNCH_CHECK("copy_kernel");
}

void launch_where(const StridedIndex& index, size_t element_bytes, const uint8_t* condition,
                  const void* x, const void* y, void* out, cudaStream_t stream) {
  if (index.total == 0) return;
  const unsigned int blocks = blocks_for(index.total);
  switch (element_bytes) {
    case 8:
      where_kernel<<<blocks, kThreads, 0, stream>>>(
          index, condition, static_cast<const uint64_t*>(x), static_cast<const uint64_t*>(y),
          static_cast<uint64_t*>(out));
      break;
    case 4:
      where_kernel<<<blocks, kThreads, 0, stream>>>(
          index, condition, static_cast<const uint32_t*>(x), static_cast<const uint32_t*>(y),
          static_cast<uint32_t*>(out));
      break;
    default:
      where_kernel<<<blocks, kThreads, 0, stream>>>(
          index, condition, static_cast<const uint8_t*>(x), static_cast<const uint8_t*>(y),
          static_cast<uint8_t*>(out));
      break;
  }
  PIPER_CUDA_LAUNCH_CHECK("where_kernel");
}

void launch_cast(Element from, Element to, int64_t n, const void* x, void* y, cudaStream_t stream) {
  if (n == 0) return;
  switch (from) {
    case Element::kFloat32:
      return cast_from<float>(to, n, x, y, stream);
    case Element::kInt64:
      return cast_from<int64_t>(to, n, x, y, stream);
    case Element::kBool:
      return cast_from<uint8_t>(to, n, x, y, stream);
  }
}

}  // namespace piper::engine::cuda
