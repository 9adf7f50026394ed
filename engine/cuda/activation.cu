// Activation kernels: one thread per element in grid-stride loops, the formulas those of the
// CPU (engine/cpu/activation_math.h).
#include <cuda_runtime.h>

#include "engine/cuda/activation.h"
#include "engine/cuda/device.cuh"

namespace piper::engine::cuda {
namespace {

__global__ void activation_kernel(Activation op, ActivationParams p, int64_t n, const float* x,
                                  float* y) {
  PIPER_GRID_STRIDE_LOOP(i, n) { y[i] = cpu::activation(op, p, x[i]); }
}

__global__ void activation_int64_kernel(Activation op, int64_t n, const int64_t* x, int64_t* y) {
  PIPER_GRID_STRIDE_LOOP(i, n) { y[i] = cpu::activation(op, x[i]); }
}

__global__ void float_class_kernel(FloatClass c, int64_t n, const float* x, uint8_t* y) {
  PIPER_GRID_STRIDE_LOOP(i, n) { y[i] = cpu::in_class(c, x[i]) ? 1 : 0; }
}

__global__ void activation_grad_kernel(Activation op, ActivationParams p, int64_t n,
                                       const float* dy, const float* s, float* dx) {
  PIPER_GRID_STRIDE_LOOP(i, n) { dx[i] = cpu::activation_grad(op, p, dy[i], s[i]); }
}

__global__ void clip_kernel(int64_t n, const float* x, const float* lo, const float* hi, float* y) {
  const float low = lo ? *lo : -INFINITY;
  const float high = hi ? *hi : INFINITY;
  PIPER_GRID_STRIDE_LOOP(i, n) {
    const float v = x[i] < low ? low : x[i];  // NaN stays NaN
    y[i] = v > high ? high : v;
  }
}

__global__ void clip_grad_kernel(int64_t n, const float* dy, const float* x, const float* y,
                                 float* dx) {
  PIPER_GRID_STRIDE_LOOP(i, n) { dx[i] = x[i] == y[i] ? dy[i] : 0.0f; }
}

}  // namespace

void launch_activation(Activation op, ActivationParams p, int64_t n, const float* x, float* y,
                       cudaStream_t stream) {
  if (n == 0) return;
  activation_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, p, n, x, y);
  PIPER_CUDA_LAUNCH_CHECK("activation_kernel");
}

void launch_activation(Activation op, int64_t n, const int64_t* x, int64_t* y,
                       cudaStream_t stream) {
  if (n == 0) return;
  activation_int64_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, n, x, y);
  PIPER_CUDA_LAUNCH_CHECK("activation_int64_kernel");
}

void launch_float_class(FloatClass c, int64_t n, const float* x, uint8_t* y, cudaStream_t stream) {
  if (n == 0) return;
  float_class_kernel<<<blocks_for(n), kThreads, 0, stream>>>(c, n, x, y);
  PIPER_CUDA_LAUNCH_CHECK("float_class_kernel");
}

void launch_activation_grad(Activation op, ActivationParams p, int64_t n, const float* dy,
                            const float* s, float* dx, cudaStream_t stream) {
  if (n == 0) return;
  activation_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, p, n, dy, s, dx);
  PIPER_CUDA_LAUNCH_CHECK("activation_grad_kernel");
}

void launch_clip(int64_t n, const float* x, const float* lo, const float* hi, float* y,
                 cudaStream_t stream) {
  if (n == 0) return;
  clip_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, x, lo, hi, y);
  PIPER_CUDA_LAUNCH_CHECK("clip_kernel");
}

void launch_clip_grad(int64_t n, const float* dy, const float* x, const float* y, float* dx,
                      cudaStream_t stream) {
  if (n == 0) return;
  clip_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, dy, x, y, dx);
  PIPER_CUDA_LAUNCH_CHECK("clip_grad_kernel");
}

}  // namespace piper::engine::cuda
