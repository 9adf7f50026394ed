// A float tensor in device memory as the kernels see it: stored as float32 or bfloat16, read
// and written as float32, bfloat16 rounding to nearest even. Kernels on float tensors compute
// in float32 whatever the storage, as PyTorch's do. Passed to kernels by value.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#endif

namespace piper::engine::cuda {

struct FloatView {
  void* data = nullptr;  // null: an omitted optional tensor
  bool bf16 = false;

#ifdef __CUDACC__
  __device__ float load(int64_t i) const {
    if (bf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    return static_cast<const float*>(data)[i];
  }
  __device__ void store(int64_t i, float value) const {
    if (bf16) {
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(value);
    } else {
      static_cast<float*>(data)[i] = value;
    }
  }
#endif
};

}  // namespace piper::engine::cuda
