#include "engine/cuda/device.cuh"
#include "engine/cuda/nd_indexing.h"
#include "engine/cuda/scatter.cuh"

namespace piper::engine::cuda {
namespace {

// The data offset of element e of the gathered tensor, or -1 (a fault reported) when one of
// its tuple's indices is out of range.
__device__ int64_t data_offset(const NdIndex& g, const int64_t* indices, int64_t e) {
  const int64_t n = e / g.slice;
  int64_t offset = (n / g.per_batch) * g.batch_stride + e % g.slice;
  for (int j = 0; j < g.k; ++j) {
    const int64_t at = n * g.k + j;
    const int64_t index = indices[at];
    const int64_t i = index < 0 ? index + g.dims[j] : index;
    if (i < 0 || i >= g.dims[j]) {
      report_fault(g.fault, g.fault_code, index, at);
      return -1;
    }
    offset += i * g.strides[j];
  }
  return offset;
}

template <typename T>
__global__ void gather_nd_kernel(NdIndex g, const T* data, const int64_t* indices, T* out) {
  PIPER_GRID_STRIDE_LOOP(e, g.tuples * g.slice) {
    const int64_t from = data_offset(g, indices, e);
    out[e] = from < 0 ? T(0) : data[from];
  }
}

template <typename T>
__global__ void scatter_nd_kernel(NdIndex g, ScatterReduction reduction, const int64_t* indices,
                                  const T* updates, T* out) {
  PIPER_GRID_STRIDE_LOOP(e, g.tuples * g.slice) {
    const int64_t to = data_offset(g, indices, e);
    if (to >= 0) combine_atomic(reduction, out + to, updates[e]);
  }
}

template <typename T>
void gather_nd(const NdIndex& g, const void* data, const int64_t* indices, void* out,
               cudaStream_t stream) {
  gather_nd_kernel<<<blocks_for(g.tuples * g.slice), kThreads, 0, stream>>>(
      g, static_cast<const T*>(data), indices, static_cast<T*>(out));
  PIPER_CUDA_LAUNCH_CHECK("gather_nd_kernel");
}

template <typename T>
void scatter_nd(const NdIndex& g, ScatterReduction reduction, const int64_t* indices,
                const void* updates, void* out, cudaStream_t stream) {
  scatter_nd_kernel<<<blocks_for(g.tuples * g.slice), kThreads, 0, stream>>>(
      g, reduction, indices, static_cast<const T*>(updates), static_cast<T*>(out));
  PIPER_CUDA_LAUNCH_CHECK("scatter_nd_kernel");
}

}  // namespace

void launch_gather_nd(const NdIndex& index, size_t element_bytes, const void* data,
                      const int64_t* indices, void* out, cudaStream_t stream) {
  if (index.tuples * index.slice == 0) return;
  switch (element_bytes) {
    case 8:
      return gather_nd<uint64_t>(index, data, indices, out, stream);
    case 4:
      return gather_nd<uint32_t>(index, data, indices, out, stream);
    case 2:
      return gather_nd<uint16_t>(index, data, indices, out, stream);
    default:
      return gather_nd<uint8_t>(index, data, indices, out, stream);
  }
}

void launch_scatter_nd(const NdIndex& index, size_t element_bytes, ScatterReduction reduction,
                       const int64_t* indices, const void* updates, void* out,
                       cudaStream_t stream) {
  if (index.tuples * index.slice == 0) return;
  switch (element_bytes) {
    case 8:
      return scatter_nd<int64_t>(index, reduction, indices, updates, out, stream);
    case 4:
      return scatter_nd<float>(index, reduction, indices, updates, out, stream);
    case 2:
      return scatter_nd<uint16_t>(index, reduction, indices, updates, out, stream);
    default:
      return scatter_nd<uint8_t>(index, reduction, indices, updates, out, stream);
  }
}

}  // namespace piper::engine::cuda
