// Elementwise kernels: one thread per output element in grid-stride loops.
//   map            y[i] = f(x[i])                      unary ops, contiguous
//   map2           dx[i] = f(dy[i], s[i])             saved-tensor gradients, contiguous
//   binary         out = op(a, b) with broadcasting    strided offsets per element
//   strided copy   transposes and broadcasts           strided offsets per element
// The strided kernels take their tensors as views (Plain, or FloatView for float tensors that
// may be bfloat16) that load and store elements.
#include <cuda_bf16.h>

#include <type_traits>

#include "engine/cpu/binary_math.h"
#include "engine/cuda/device.cuh"
#include "engine/cuda/elementwise.h"

namespace piper::engine::cuda {
namespace {

// A tensor of T, loaded and stored as it is.
template <typename T>
struct Plain {
  T* data;
  __device__ T load(int64_t i) const { return data[i]; }
  __device__ void store(int64_t i, T value) const { data[i] = value; }
};

template <typename T>
Plain<T> plain(const void* data) {
  return Plain<T>{static_cast<T*>(const_cast<void*>(data))};
}

template <typename T, typename F>
__global__ void map_kernel(int64_t n, const T* x, T* y, F f) {
  PIPER_GRID_STRIDE_LOOP(i, n) { y[i] = f(x[i]); }
}

template <typename F>
__global__ void map2_kernel(int64_t n, const float* a, const float* b, float* y, F f) {
  PIPER_GRID_STRIDE_LOOP(i, n) { y[i] = f(a[i], b[i]); }
}

template <typename A, typename B, typename Out, typename F>
__global__ void binary_kernel(StridedIndex index, A a, B b, Out out, F f) {
  int64_t offsets[3];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, offsets);
    out.store(offsets[0], f(a.load(offsets[1]), b.load(offsets[2])));
  }
}

template <typename V>
__global__ void copy_kernel(StridedIndex index, V in, V out) {
  int64_t offsets[2];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, offsets);
    out.store(offsets[0], in.load(offsets[1]));
  }
}

__global__ void scaled_copy_kernel(StridedIndex index, FloatView in, FloatView out, float scale) {
  int64_t offsets[2];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, offsets);
    out.store(offsets[0], scale * in.load(offsets[1]));
  }
}

template <typename V>
__global__ void where_kernel(StridedIndex index, const uint8_t* condition, V x, V y, V out) {
  int64_t offsets[4];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, offsets);
    out.store(offsets[0], condition[offsets[1]] ? x.load(offsets[2]) : y.load(offsets[3]));
  }
}

// One element as ONNX Cast converts it (engine/cpu/logical.cc); bfloat16 goes through float32.
template <typename To, typename From>
__device__ To convert(From v) {
  if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return v != From(0) ? 1 : 0;
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, int64_t>) {
    constexpr float kLimit = 9223372036854775808.0f;  // 2^63; NaN and beyond give INT64_MIN
    return v >= -kLimit && v < kLimit ? static_cast<int64_t>(v) : INT64_MIN;
  } else {
    return static_cast<To>(v);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(int64_t n, const From* x, To* y) {
  PIPER_GRID_STRIDE_LOOP(i, n) { y[i] = convert<To>(x[i]); }
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

template <typename A, typename B, typename Out, typename F>
void binary(const StridedIndex& index, A a, B b, Out out, F f, cudaStream_t stream) {
  if (index.total == 0) return;
  binary_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(index, a, b, out, f);
  PIPER_CUDA_LAUNCH_CHECK("binary_kernel");
}

// Arithmetic on views V of T (float32 for float views, which may store bfloat16); NaN
// propagates through Max and Min, as in PyTorch.
template <typename T, typename V>
void arithmetic(Binary op, const StridedIndex& index, V a, V b, V out, cudaStream_t stream) {
  switch (op) {
    case Binary::kAdd:
      return binary(
          index, a, b, out, [] __device__(T x, T y) { return x + y; }, stream);
    case Binary::kSub:
      return binary(
          index, a, b, out, [] __device__(T x, T y) { return x - y; }, stream);
    case Binary::kMul:
      return binary(
          index, a, b, out, [] __device__(T x, T y) { return x * y; }, stream);
    case Binary::kDiv:
      return binary(
          index, a, b, out, [] __device__(T x, T y) { return x / y; }, stream);
    case Binary::kMax:
      return binary(
          index, a, b, out, [] __device__(T x, T y) { return y != y || y > x ? y : x; }, stream);
    case Binary::kMin:
      return binary(
          index, a, b, out, [] __device__(T x, T y) { return y != y || y < x ? y : x; }, stream);
    case Binary::kPRelu:  // NaN propagates
      return binary(
          index, a, b, out, [] __device__(T x, T slope) { return x < T(0) ? slope * x : x; },
          stream);
    case Binary::kMod:
      return binary(
          index, a, b, out, [] __device__(T x, T y) { return cpu::mod(x, y, false); }, stream);
    case Binary::kFmod:
      return binary(
          index, a, b, out, [] __device__(T x, T y) { return cpu::mod(x, y, true); }, stream);
    default:
      break;
  }
}

template <typename T>
void comparison(Binary op, const StridedIndex& index, const void* a, const void* b, void* out,
                cudaStream_t stream) {
  const Plain<T> x = plain<T>(a), y = plain<T>(b);
  const Plain<uint8_t> z = plain<uint8_t>(out);
  switch (op) {
    case Binary::kEqual:
      return binary(
          index, x, y, z, [] __device__(T u, T v) -> uint8_t { return u == v; }, stream);
    case Binary::kLess:
      return binary(
          index, x, y, z, [] __device__(T u, T v) -> uint8_t { return u < v; }, stream);
    case Binary::kGreater:
      return binary(
          index, x, y, z, [] __device__(T u, T v) -> uint8_t { return u > v; }, stream);
    case Binary::kLessOrEqual:
      return binary(
          index, x, y, z, [] __device__(T u, T v) -> uint8_t { return u <= v; }, stream);
    case Binary::kGreaterOrEqual:
      return binary(
          index, x, y, z, [] __device__(T u, T v) -> uint8_t { return u >= v; }, stream);
    case Binary::kAnd:
      return binary(
          index, x, y, z, [] __device__(T u, T v) -> uint8_t { return u != 0 && v != 0; }, stream);
    case Binary::kOr:
      return binary(
          index, x, y, z, [] __device__(T u, T v) -> uint8_t { return u != 0 || v != 0; }, stream);
    case Binary::kXor:
      return binary(
          index, x, y, z, [] __device__(T u, T v) -> uint8_t { return (u != 0) != (v != 0); },
          stream);
    default:
      break;
  }
}

template <typename V>
void copy(const StridedIndex& index, V in, V out, cudaStream_t stream) {
  copy_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(index, in, out);
  PIPER_CUDA_LAUNCH_CHECK("copy_kernel");
}

template <typename V>
void where(const StridedIndex& index, const uint8_t* condition, V x, V y, V out,
           cudaStream_t stream) {
  where_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(index, condition, x, y, out);
  PIPER_CUDA_LAUNCH_CHECK("where_kernel");
}

template <typename From>
void cast_from(Element to, int64_t n, const void* x, void* y, cudaStream_t stream) {
  const auto* in = static_cast<const From*>(x);
  const unsigned int blocks = blocks_for(n);
  switch (to) {
    case Element::kFloat32:
      cast_kernel<<<blocks, kThreads, 0, stream>>>(n, in, static_cast<float*>(y));
      break;
    case Element::kBFloat16:
      cast_kernel<<<blocks, kThreads, 0, stream>>>(n, in, static_cast<__nv_bfloat16*>(y));
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

void launch_float_binary(Binary op, const StridedIndex& index, FloatView a, FloatView b,
                         FloatView out, cudaStream_t stream) {
  arithmetic<float>(op, index, a, b, out, stream);
}

void launch_binary(Binary op, Element type, const StridedIndex& index, const void* a, const void* b,
                   void* out, cudaStream_t stream) {
  const bool compare = op >= Binary::kEqual;  // the comparisons and logic ops follow kEqual
  switch (type) {
    case Element::kFloat32:
      return comparison<float>(op, index, a, b, out, stream);
    case Element::kInt64:
      return compare ? comparison<int64_t>(op, index, a, b, out, stream)
                     : arithmetic<int64_t>(op, index, plain<int64_t>(a), plain<int64_t>(b),
                                           plain<int64_t>(out), stream);
    case Element::kBool:
      return comparison<uint8_t>(op, index, a, b, out, stream);
    case Element::kBFloat16:  // arithmetic goes through launch_float_binary
      break;
  }
}

void launch_scaled_copy(const StridedIndex& index, FloatView in, FloatView out, float scale,
                        cudaStream_t stream) {
  if (index.total == 0) return;
  scaled_copy_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(index, in, out, scale);
  PIPER_CUDA_LAUNCH_CHECK("scaled_copy_kernel");
}

void launch_strided_copy(const StridedIndex& index, size_t element_bytes, const void* in, void* out,
                         cudaStream_t stream) {
  if (index.total == 0) return;
  switch (element_bytes) {
    case 8:
      return copy(index, plain<uint64_t>(in), plain<uint64_t>(out), stream);
    case 4:
      return copy(index, plain<uint32_t>(in), plain<uint32_t>(out), stream);
    case 2:
      return copy(index, plain<uint16_t>(in), plain<uint16_t>(out), stream);
    default:
      return copy(index, plain<uint8_t>(in), plain<uint8_t>(out), stream);
  }
}

void launch_where(const StridedIndex& index, size_t element_bytes, const uint8_t* condition,
                  const void* x, const void* y, void* out, cudaStream_t stream) {
  if (index.total == 0) return;
  switch (element_bytes) {
    case 8:
      return where(index, condition, plain<uint64_t>(x), plain<uint64_t>(y), plain<uint64_t>(out),
                   stream);
    case 4:
      return where(index, condition, plain<uint32_t>(x), plain<uint32_t>(y), plain<uint32_t>(out),
                   stream);
    case 2:
      return where(index, condition, plain<uint16_t>(x), plain<uint16_t>(y), plain<uint16_t>(out),
                   stream);
    default:
      return where(index, condition, plain<uint8_t>(x), plain<uint8_t>(y), plain<uint8_t>(out),
                   stream);
  }
}

void launch_float_where(const StridedIndex& index, const uint8_t* condition, FloatView x,
                        FloatView y, FloatView out, cudaStream_t stream) {
  if (index.total == 0) return;
  where(index, condition, x, y, out, stream);
}

void launch_cast(Element from, Element to, int64_t n, const void* x, void* y, cudaStream_t stream) {
  if (n == 0) return;
  switch (from) {
    case Element::kFloat32:
      return cast_from<float>(to, n, x, y, stream);
    case Element::kBFloat16:
      return cast_from<__nv_bfloat16>(to, n, x, y, stream);
    case Element::kInt64:
      return cast_from<int64_t>(to, n, x, y, stream);
    case Element::kBool:
      return cast_from<uint8_t>(to, n, x, y, stream);
  }
}

}  // namespace piper::engine::cuda
