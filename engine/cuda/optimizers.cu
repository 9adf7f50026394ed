// Optimizer updates: one thread per parameter element, the same float32 arithmetic in
// the same order as the CPU kernels.
#include "engine/cuda/device.cuh"
#include "engine/cuda/optimizers.h"

namespace piper::engine::cuda {
namespace {

__global__ void adamw_kernel(AdamWStep s, int64_t n, float* p, const float* g, float* m, float* v) {
  PIPER_GRID_STRIDE_LOOP(i, n) {
    const float grad = g[i];
    float param = p[i] * s.decay;
    const float mean = m[i] * s.beta1 + s.one_minus_beta1 * grad;
    const float variance = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    const float denom = sqrtf(variance) / s.bias_correction2_sqrt + s.epsilon;
    param -= s.step_size * (mean / denom);
    p[i] = param;
    m[i] = mean;
    v[i] = variance;
  }
}

__global__ void sgd_kernel(SgdStep s, int64_t n, float* p, const float* g, float* m) {
  PIPER_GRID_STRIDE_LOOP(i, n) {
    float grad = g[i];
    if (s.weight_decay != 0.0f) grad += s.weight_decay * p[i];
    if (m != nullptr) {
      const float buffer = s.first ? grad : s.momentum * m[i] + s.keep * grad;
      m[i] = buffer;
      grad = s.nesterov ? grad + s.momentum * buffer : buffer;
    }
    p[i] -= s.lr * grad;
  }
}

}  // namespace

void launch_adamw(const AdamWStep& step, int64_t n, float* p, const float* g, float* m, float* v,
                  cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(step, n, p, g, m, v);
  PIPER_CUDA_LAUNCH_CHECK("adamw_kernel");
}

void launch_sgd(const SgdStep& step, int64_t n, float* p, const float* g, float* m,
                cudaStream_t stream) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(step, n, p, g, m);
  PIPER_CUDA_LAUNCH_CHECK("sgd_kernel");
}

}  // namespace piper::engine::cuda
