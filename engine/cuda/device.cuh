// Device-side helpers shared by the kernel files: launch sizes for grid-stride
// loops, warp and block reductions, and fault reporting.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/check.h"
#include "engine/cuda/fault.h"

namespace piper::engine::cuda {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `n` elements: enough to fill the GPU, no more.
inline unsigned int blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

#define PIPER_GRID_STRIDE_LOOP(i, n)                                                     \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

template <typename T>
__device__ T warp_sum(T value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ inline float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// The sum of `value` over the block (blockDim.x a multiple of 32, at most 1024), on every
// thread. `shared` holds 32 elements; the block must call it uniformly.
template <typename T>
__device__ T block_sum(T value, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  value = warp_sum(value);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : T(0);
  return warp_sum(value);
}

__device__ inline float block_max(float value, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : -INFINITY;
  return warp_max(value);
}

// Records a fault (the first one wins) for the host to report after the stream finishes.
__device__ inline void report_fault(DeviceFault* fault, int32_t code, int64_t value,
                                    int64_t position) {
  if (atomicCAS(&fault->code, 0, code) == 0) {
    fault->value = value;
    fault->position = position;
  }
}

}  // namespace piper::engine::cuda
