#include "engine/cpu/power_math.h"
#include "engine/cuda/device.cuh"
#include "engine/cuda/power.h"

namespace piper::engine::cuda {
namespace {

template <typename T, typename E>
__global__ void pow_kernel(StridedIndex index, const T* a, const E* b, T* y) {
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    int64_t o[3];
    index.offsets(i, o);
    y[o[0]] = cpu::power(a[o[1]], b[o[2]]);
  }
}

template <typename T, typename E>
void pow_as(const StridedIndex& index, const void* a, const void* b, void* y, cudaStream_t stream) {
  pow_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(
      index, static_cast<const T*>(a), static_cast<const E*>(b), static_cast<T*>(y));
  PIPER_CUDA_LAUNCH_CHECK("pow_kernel");
}

template <PowGrad kGrad, typename E>
__global__ void pow_grad_kernel(StridedIndex index, const float* dy, const float* a, const E* b,
                                float* dx) {
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    int64_t o[4];
    index.offsets(i, o);
    if constexpr (kGrad == PowGrad::kBase) {
      dx[o[0]] = cpu::pow_base_grad(dy[o[1]], a[o[2]], static_cast<float>(b[o[3]]));
    } else {
      dx[o[0]] = cpu::pow_exponent_grad(dy[o[1]], a[o[2]], b[o[3]]);
    }
  }
}

template <PowGrad kGrad, typename E>
void pow_grad_as(const StridedIndex& index, const float* dy, const float* a, const void* b,
                 float* dx, cudaStream_t stream) {
  pow_grad_kernel<kGrad><<<blocks_for(index.total), kThreads, 0, stream>>>(
      index, dy, a, static_cast<const E*>(b), dx);
  PIPER_CUDA_LAUNCH_CHECK("pow_grad_kernel");
}

}  // namespace

void launch_pow(const StridedIndex& index, bool int_base, bool int_exponent, const void* a,
                const void* b, void* y, cudaStream_t stream) {
  if (index.total == 0) return;
  if (int_base) {
    return int_exponent ? pow_as<int64_t, int64_t>(index, a, b, y, stream)
                        : pow_as<int64_t, float>(index, a, b, y, stream);
  }
  return int_exponent ? pow_as<float, int64_t>(index, a, b, y, stream)
                      : pow_as<float, float>(index, a, b, y, stream);
}

void launch_pow_grad(PowGrad grad, const StridedIndex& index, bool int_b, const float* dy,
                     const float* a, const void* b, float* dx, cudaStream_t stream) {
  if (index.total == 0) return;
  if (grad == PowGrad::kExponent) {
    return pow_grad_as<PowGrad::kExponent, float>(index, dy, a, b, dx, stream);
  }
  return int_b ? pow_grad_as<PowGrad::kBase, int64_t>(index, dy, a, b, dx, stream)
               : pow_grad_as<PowGrad::kBase, float>(index, dy, a, b, dx, stream);
}

}  // namespace piper::engine::cuda
