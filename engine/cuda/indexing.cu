// Gathers: one thread per gathered element; the scatter-add adds with atomics.
#include "engine/cuda/device.cuh"
#include "engine/cuda/indexing.h"

namespace piper::engine::cuda {
namespace {

// The row of `data` that gathered element e reads, or -1 (fault reported) when its index is
// out of range.
__device__ int64_t source_row(const GatherShape& s, const int64_t* indices, int64_t e) {
  const int64_t j = (e / s.inner) % s.count;
  const int64_t index = indices[j];
  const int64_t i = index < 0 ? index + s.axis : index;
  if (i < 0 || i >= s.axis) {
    report_fault(s.fault, s.fault_code, index, j);
    return -1;
  }
  return (e / (s.inner * s.count)) * s.axis + i;
}

template <typename T>
__global__ void gather_kernel(GatherShape s, const T* data, const int64_t* indices, T* out) {
  PIPER_GRID_STRIDE_LOOP(e, s.outer * s.count * s.inner) {
    const int64_t row = source_row(s, indices, e);
    out[e] = row < 0 ? T(0) : data[row * s.inner + e % s.inner];
  }
}

__global__ void gather_grad_kernel(GatherShape s, const float* dy, const int64_t* indices,
                                   float* dx) {
  PIPER_GRID_STRIDE_LOOP(e, s.outer * s.count * s.inner) {
    const int64_t row = source_row(s, indices, e);
    if (row >= 0) atomicAdd(dx + row * s.inner + e % s.inner, dy[e]);
  }
}

}  // namespace

void launch_gather(const GatherShape& shape, size_t element_bytes, const void* data,
                   const int64_t* indices, void* out, cudaStream_t stream) {
  const int64_t n = shape.outer * shape.count * shape.inner;
  if (n == 0) return;
  const unsigned int blocks = blocks_for(n);
  switch (element_bytes) {
    case 8:
      gather_kernel<<<blocks, kThreads, 0, stream>>>(shape, static_cast<const uint64_t*>(data),
                                                     indices, static_cast<uint64_t*>(out));
      break;
    case 4:
      gather_kernel<<<blocks, kThreads, 0, stream>>>(shape, static_cast<const uint32_t*>(data),
                                                     indices, static_cast<uint32_t*>(out));
      break;
    default:
      gather_kernel<<<blocks, kThreads, 0, stream>>>(shape, static_cast<const uint8_t*>(data),
                                                     indices, static_cast<uint8_t*>(out));
      break;
  }
  PIPER_CUDA_LAUNCH_CHECK("gather_kernel");
}

void launch_gather_grad(const GatherShape& shape, const float* dy, const int64_t* indices,
                        float* dx, cudaStream_t stream) {
  const int64_t total = shape.outer * shape.axis * shape.inner;
  if (total > 0) PIPER_CUDA_CHECK(cudaMemsetAsync(dx, 0, total * sizeof(float), stream));
  const int64_t n = shape.outer * shape.count * shape.inner;
  if (n == 0) return;
  gather_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(shape, dy, indices, dx);
  PIPER_CUDA_LAUNCH_CHECK("gather_grad_kernel");
}

}  // namespace piper::engine::cuda
