#include "engine/cuda/device.cuh"
#include "engine/cuda/gather_elements.h"
#include "engine/cuda/scatter.cuh"

namespace piper::engine::cuda {
namespace {

// The data offset index e picks, or -1 (a fault reported) when it is out of range; `e_offset`
// receives e's offset in the indices.
__device__ int64_t picked(const ElementsIndex& g, const int64_t* indices, int64_t e,
                          int64_t* e_offset) {
  int64_t o[2];
  g.index.offsets(e, o);
  *e_offset = o[0];
  const int64_t index = indices[o[0]];
  const int64_t i = index < 0 ? index + g.axis_size : index;
  if (i < 0 || i >= g.axis_size) {
    report_fault(g.fault, g.fault_code, index, o[0]);
    return -1;
  }
  return o[1] + i * g.axis_stride;
}

template <typename T>
__global__ void gather_elements_kernel(ElementsIndex g, const T* x, const int64_t* indices, T* y) {
  PIPER_GRID_STRIDE_LOOP(e, g.index.total) {
    int64_t at = 0;
    const int64_t from = picked(g, indices, e, &at);
    if (from >= 0) y[at] = x[from];
  }
}

template <typename T>
void gather_elements(const ElementsIndex& g, const void* x, const int64_t* indices, void* y,
                     cudaStream_t stream) {
  gather_elements_kernel<<<blocks_for(g.index.total), kThreads, 0, stream>>>(
      g, static_cast<const T*>(x), indices, static_cast<T*>(y));
  PIPER_CUDA_LAUNCH_CHECK("gather_elements_kernel");
}

__global__ void gather_elements_grad_kernel(ElementsIndex g, const float* dy,
                                            const int64_t* indices, float* dx) {
  PIPER_GRID_STRIDE_LOOP(e, g.index.total) {
    int64_t at = 0;
    const int64_t to = picked(g, indices, e, &at);
    if (to >= 0) atomicAdd(dx + to, dy[at]);
  }
}

template <typename T>
__global__ void scatter_elements_kernel(ElementsIndex g, ScatterReduction reduction,
                                        const int64_t* indices, const T* updates, T* y) {
  PIPER_GRID_STRIDE_LOOP(e, g.index.total) {
    int64_t at = 0;
    const int64_t to = picked(g, indices, e, &at);
    if (to >= 0) combine_atomic(reduction, y + to, updates[at]);
  }
}

template <typename T>
void scatter_elements(const ElementsIndex& g, ScatterReduction reduction, const int64_t* indices,
                      const void* updates, void* y, cudaStream_t stream) {
  scatter_elements_kernel<<<blocks_for(g.index.total), kThreads, 0, stream>>>(
      g, reduction, indices, static_cast<const T*>(updates), static_cast<T*>(y));
  PIPER_CUDA_LAUNCH_CHECK("scatter_elements_kernel");
}

}  // namespace

void launch_gather_elements(const ElementsIndex& g, size_t element_bytes, const void* x,
                            const int64_t* indices, void* y, cudaStream_t stream) {
  if (g.index.total == 0) return;
  switch (element_bytes) {
    case 8:
      return gather_elements<uint64_t>(g, x, indices, y, stream);
    case 4:
      return gather_elements<uint32_t>(g, x, indices, y, stream);
    case 2:
      return gather_elements<uint16_t>(g, x, indices, y, stream);
    default:
      return gather_elements<uint8_t>(g, x, indices, y, stream);
  }
}

void launch_gather_elements_grad(const ElementsIndex& g, const float* dy, const int64_t* indices,
                                 float* dx, cudaStream_t stream) {
  if (g.index.total == 0) return;
  gather_elements_grad_kernel<<<blocks_for(g.index.total), kThreads, 0, stream>>>(g, dy, indices,
                                                                                  dx);
  PIPER_CUDA_LAUNCH_CHECK("gather_elements_grad_kernel");
}

void launch_scatter_elements(const ElementsIndex& g, size_t element_bytes,
                             ScatterReduction reduction, const int64_t* indices,
                             const void* updates, void* y, cudaStream_t stream) {
  if (g.index.total == 0) return;
  switch (element_bytes) {
    case 8:
      return scatter_elements<int64_t>(g, reduction, indices, updates, y, stream);
    case 4:
      return scatter_elements<float>(g, reduction, indices, updates, y, stream);
    case 2:
      return scatter_elements<uint16_t>(g, reduction, indices, updates, y, stream);
    default:
      return scatter_elements<uint8_t>(g, reduction, indices, updates, y, stream);
  }
}

}  // namespace piper::engine::cuda
