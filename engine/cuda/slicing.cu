#include "engine/cuda/device.cuh"
#include "engine/cuda/slicing.h"

namespace piper::engine::cuda {
namespace {

template <typename T>
__global__ void trilu_kernel(int64_t total, int64_t rows, int64_t cols, bool upper,
                             const int64_t* pk, const T* x, T* y) {
  const int64_t k = pk != nullptr ? *pk : 0;
  PIPER_GRID_STRIDE_LOOP(i, total) {
    const int64_t j = i % cols, row = i / cols % rows;
    const bool keep = upper ? j >= row + k : j <= row + k;
    y[i] = keep ? x[i] : T{0};
  }
}

template <typename T>
void trilu(int64_t total, int64_t rows, int64_t cols, bool upper, const int64_t* k, const void* x,
           void* y, cudaStream_t stream) {
  trilu_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
      total, rows, cols, upper, k, static_cast<const T*>(x), static_cast<T*>(y));
  PIPER_CUDA_LAUNCH_CHECK("trilu_kernel");
}

}  // namespace

void launch_trilu(int64_t total, int64_t rows, int64_t cols, bool upper, const int64_t* k,
                  size_t element_bytes, const void* x, void* y, cudaStream_t stream) {
  if (total == 0) return;
  switch (element_bytes) {
    case 8:
      return trilu<uint64_t>(total, rows, cols, upper, k, x, y, stream);
    case 4:
      return trilu<uint32_t>(total, rows, cols, upper, k, x, y, stream);
    case 2:
      return trilu<uint16_t>(total, rows, cols, upper, k, x, y, stream);
    default:
      return trilu<uint8_t>(total, rows, cols, upper, k, x, y, stream);
  }
}

}  // namespace piper::engine::cuda
