#include "engine/cuda/device.cuh"
#include "engine/cuda/dropout.h"

namespace piper::engine::cuda {
namespace {

__global__ void dropout_kernel(dropout::Mode mode, uint64_t key, dropout::Box box, int64_t n,
                               const float* x, float* y, uint8_t* mask, DeviceFault* fault,
                               int32_t fault_code) {
  const float p = mode.probability();
  const bool drops = mode.training() && p != 0.0f;
  if (drops && (p < 0.0f || p > 1.0f)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report_fault(fault, fault_code, __float_as_uint(p), 0);
    return;
  }
  const float scale = mode.scale();
  const uint64_t threshold = dropout::threshold(p);
  PIPER_GRID_STRIDE_LOOP(i, n) {
    const bool keep = !drops || dropout::keeps(key, dropout::global_index(box, i), threshold);
    if (drops) {
      y[i] = keep ? x[i] * scale : 0.0f;
    } else {
      y[i] = x[i];
    }
    if (mask != nullptr) mask[i] = keep ? 1 : 0;
  }
}

__global__ void dropout_grad_kernel(dropout::Mode mode, int64_t n, const float* dy,
                                    const uint8_t* mask, float* dx) {
  const float scale = mode.scale();
  PIPER_GRID_STRIDE_LOOP(i, n) { dx[i] = mask[i] != 0 ? dy[i] * scale : 0.0f; }
}

}  // namespace

void launch_dropout(dropout::Mode mode, uint64_t key, const dropout::Box& box, int64_t n,
                    const float* x, float* y, uint8_t* mask, DeviceFault* fault, int32_t fault_code,
                    cudaStream_t stream) {
  if (n == 0) return;
  dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(mode, key, box, n, x, y, mask, fault,
                                                         fault_code);
  PIPER_CUDA_LAUNCH_CHECK("dropout_kernel");
}

void launch_dropout_grad(dropout::Mode mode, int64_t n, const float* dy, const uint8_t* mask,
                         float* dx, cudaStream_t stream) {
  if (n == 0) return;
  dropout_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(mode, n, dy, mask, dx);
  PIPER_CUDA_LAUNCH_CHECK("dropout_grad_kernel");
}

}  // namespace piper::engine::cuda
