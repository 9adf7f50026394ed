// Optimizer updates: one thread per parameter element, the same float32 arithmetic in
// the same order as the CPU kernels; and the sum of squares of the gradient norm.
#include "engine/cpu/optimizer_math.h"
#include "engine/cuda/device.cuh"
#include "engine/cuda/optimizers.h"

namespace piper::engine::cuda {
namespace {

// A step skipped for a non-finite gradient norm (read on the device: no host round trip).
__device__ bool skipped(const float* norm) { return norm != nullptr && !isfinite(*norm); }

__device__ float grad_scale(float max_norm, const float* norm) {
  return norm != nullptr ? cpu::clip_scale(max_norm, *norm) : 1.0f;
}

__global__ void adamw_kernel(AdamWStep s, int64_t n, float* p, const float* g, float* m, float* v,
                             const float* norm) {
  if (skipped(norm)) return;
  const float scale = grad_scale(s.max_norm, norm);
  PIPER_GRID_STRIDE_LOOP(i, n) {
    const float grad = g[i] * scale;
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

__global__ void sgd_kernel(SgdStep s, int64_t n, float* p, const float* g, float* m,
                           const float* norm) {
  if (skipped(norm)) return;
  const float scale = grad_scale(s.max_norm, norm);
  PIPER_GRID_STRIDE_LOOP(i, n) {
    float grad = g[i] * scale;
    if (s.weight_decay != 0.0f) grad += s.weight_decay * p[i];
    if (m != nullptr) {
      const float buffer = s.first ? grad : s.momentum * m[i] + s.keep * grad;
      m[i] = buffer;
      grad = s.nesterov ? grad + s.momentum * buffer : buffer;
    }
    p[i] -= s.lr * grad;
  }
}

__global__ void sum_squares_kernel(const float* x, int64_t n, double* partials) {
  __shared__ double shared[32];
  double sum = 0.0;
  PIPER_GRID_STRIDE_LOOP(i, n) {
    const double value = x[i];
    sum += value * value;
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void add_partials_kernel(const double* partials, int64_t n, float* y) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *y = static_cast<float>(sum);
}

}  // namespace

void launch_sum_squares(const std::vector<const float*>& x, const std::vector<int64_t>& counts,
                        double* partials, float* y, cudaStream_t stream) {
  for (size_t i = 0; i < x.size(); ++i) {
    sum_squares_kernel<<<kSumSquaresBlocks, kThreads, 0, stream>>>(
        x[i], counts[i], partials + i * kSumSquaresBlocks);
    PIPER_CUDA_LAUNCH_CHECK("sum_squares_kernel");
  }
  add_partials_kernel<<<1, kThreads, 0, stream>>>(
      partials, static_cast<int64_t>(x.size()) * kSumSquaresBlocks, y);
  PIPER_CUDA_LAUNCH_CHECK("add_partials_kernel");
}

void launch_adamw(const AdamWStep& step, int64_t n, float* p, const float* g, float* m, float* v,
                  const float* norm, cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(step, n, p, g, m, v, norm);
  PIPER_CUDA_LAUNCH_CHECK("adamw_kernel");
}

void launch_sgd(const SgdStep& step, int64_t n, float* p, const float* g, float* m,
                const float* norm, cudaStream_t stream) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(step, n, p, g, m, norm);
  PIPER_CUDA_LAUNCH_CHECK("sgd_kernel");
}

}  // namespace piper::engine::cuda
