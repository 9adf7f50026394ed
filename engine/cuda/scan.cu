#include "engine/cuda/device.cuh"
#include "engine/cuda/scan.h"

namespace piper::engine::cuda {
namespace {

// One thread per line along the axis, which is known only on the device.
template <typename T, typename Acc>
__global__ void cum_sum_kernel(ScanShape shape, bool exclusive, bool reverse, const int64_t* axis,
                               const T* x, T* y, DeviceFault* fault, int32_t fault_code) {
  const int64_t a = *axis < 0 ? *axis + shape.rank : *axis;
  if (a < 0 || a >= shape.rank) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report_fault(fault, fault_code, *axis, 0);
    return;
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= shape.sizes[d];
  for (int64_t d = a + 1; d < shape.rank; ++d) inner *= shape.sizes[d];
  const int64_t n = shape.sizes[a];
  PIPER_GRID_STRIDE_LOOP(line, outer * inner) {
    const int64_t o = line / inner, k = line % inner;
    Acc acc = 0;
    for (int64_t step = 0; step < n; ++step) {
      const int64_t at = (o * n + (reverse ? n - 1 - step : step)) * inner + k;
      const Acc before = acc;
      acc += static_cast<Acc>(x[at]);
      y[at] = static_cast<T>(exclusive ? before : acc);
    }
  }
}

template <typename T, typename Acc>
void cum_sum(const ScanShape& shape, bool exclusive, bool reverse, const int64_t* axis,
             const void* x, void* y, DeviceFault* fault, int32_t fault_code, cudaStream_t stream) {
  cum_sum_kernel<T, Acc><<<blocks_for(shape.elements), kThreads, 0, stream>>>(
      shape, exclusive, reverse, axis, static_cast<const T*>(x), static_cast<T*>(y), fault,
      fault_code);
  PIPER_CUDA_LAUNCH_CHECK("cum_sum_kernel");
}

}  // namespace

void launch_cum_sum(const ScanShape& shape, bool int64, bool exclusive, bool reverse,
                    const int64_t* axis, const void* x, void* y, DeviceFault* fault,
                    int32_t fault_code, cudaStream_t stream) {
  return int64 ? cum_sum<int64_t, int64_t>(shape, exclusive, reverse, axis, x, y, fault, fault_code,
                                           stream)
               : cum_sum<float, double>(shape, exclusive, reverse, axis, x, y, fault, fault_code,
                                        stream);
}

}  // namespace piper::engine::cuda
