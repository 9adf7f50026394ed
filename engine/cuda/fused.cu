// Kernels of the fused ops: BiasGelu maps one thread per element; attention's row-wise
// steps take one block per row of scores, like the softmax (normalization.cu).
#include "engine/cuda/device.cuh"
#include "engine/cuda/fused.h"

namespace piper::engine::cuda {
namespace {

constexpr float kSqrt2 = 1.41421356237f;
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2Pi = 0.3989422804f;

// The arithmetic of engine/cpu/fused_bias_gelu.cc, in the same order.
__device__ float gelu(Gelu kind, float h) {
  if (kind == Gelu::kErf) return (h * (1.0f + erff(h / kSqrt2))) * 0.5f;
  return 0.5f * (h * (1.0f + tanhf(kSqrt2OverPi * (h + kCubic * (h * (h * h))))));
}

__device__ float gelu_derivative(Gelu kind, float h) {
  if (kind == Gelu::kErf) {
    return 0.5f * (1.0f + erff(h / kSqrt2)) + h * kInvSqrt2Pi * expf(-0.5f * h * h);
  }
  const float t = tanhf(kSqrt2OverPi * (h + kCubic * h * h * h));
  return 0.5f * (1.0f + t) +
         0.5f * h * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * h * h);
}

// x[i] + bias[i % n], or x[i] without a bias.
__device__ float biased(int64_t i, int64_t n, FloatView x, FloatView bias) {
  return bias.data != nullptr ? x.load(i) + bias.load(i % n) : x.load(i);
}

__global__ void bias_gelu_kernel(Gelu kind, int64_t total, int64_t n, FloatView x, FloatView bias,
                                 FloatView y) {
  PIPER_GRID_STRIDE_LOOP(i, total) { y.store(i, gelu(kind, biased(i, n, x, bias))); }
}

__global__ void bias_gelu_grad_kernel(Gelu kind, int64_t total, int64_t n, FloatView dy,
                                      FloatView x, FloatView bias, FloatView dx) {
  PIPER_GRID_STRIDE_LOOP(i, total) {
    dx.store(i, dy.load(i) * gelu_derivative(kind, biased(i, n, x, bias)));
  }
}

// Score j of `row` after the mask; *filled tells whether a bool mask set it.
__device__ float masked(const AttentionRows& r, const AttentionMask& mask, int64_t row, int64_t j,
                        float s, bool* filled) {
  *filled = false;
  if (mask.kind == AttentionMask::Kind::kNone) return s;
  const int64_t at =
      mask.offsets[r.first_batch + row / r.t] + (row % r.t) * mask.row_stride + j * mask.key_stride;
  if (mask.kind == AttentionMask::Kind::kAdd) return s + FloatView{mask.data, mask.bf16}.load(at);
  *filled = (static_cast<const uint8_t*>(mask.data)[at] != 0) == mask.fill_if;
  return *filled ? mask.fill : s;
}

__global__ void attention_softmax_kernel(AttentionRows r, AttentionMask mask, float* s,
                                         float* row_max, float* row_inv_sum) {
  __shared__ float shared[32];
  bool filled = false;
  for (int64_t row = blockIdx.x; row < r.batches * r.t; row += gridDim.x) {
    float* scores = s + row * r.tk;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < r.tk; j += blockDim.x) {
      scores[j] = masked(r, mask, row, j, scores[j], &filled);
      m = fmaxf(m, scores[j]);
    }
    m = block_max(m, shared);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < r.tk; j += blockDim.x) sum += expf(scores[j] - m);
    const float inv = 1.0f / block_sum(sum, shared);
    for (int64_t j = threadIdx.x; j < r.tk; j += blockDim.x) scores[j] = expf(scores[j] - m) * inv;
    if (threadIdx.x == 0) {
      const int64_t global = r.first_batch * r.t + row;
      if (row_max != nullptr) row_max[global] = m;
      if (row_inv_sum != nullptr) row_inv_sum[global] = inv;
    }
  }
}

__global__ void attention_probabilities_kernel(AttentionRows r, AttentionMask mask, float* s,
                                               const float* row_max, const float* row_inv_sum) {
  bool filled = false;
  const int64_t total = r.batches * r.t * r.tk;
  PIPER_GRID_STRIDE_LOOP(e, total) {
    const int64_t row = e / r.tk;
    const int64_t global = r.first_batch * r.t + row;
    s[e] =
        expf(masked(r, mask, row, e % r.tk, s[e], &filled) - row_max[global]) * row_inv_sum[global];
  }
}

__global__ void attention_score_grad_kernel(AttentionRows r, AttentionMask mask, const float* p,
                                            float* dp, RowOutputs y) {
  __shared__ float shared[32];
  bool filled = false;
  for (int64_t row = blockIdx.x; row < r.batches * r.t; row += gridDim.x) {
    const float* pr = p + row * r.tk;
    float* g = dp + row * r.tk;
    float dot = 0.0f;
    if (y.y.data != nullptr) {
      const int64_t at = (r.first_batch * r.t + row) * y.dv;
      for (int64_t c = threadIdx.x; c < y.dv; c += blockDim.x) {
        dot += y.dy.load(at + c) * y.y.load(at + c);
      }
    } else {
      for (int64_t j = threadIdx.x; j < r.tk; j += blockDim.x) dot += g[j] * pr[j];
    }
    dot = block_sum(dot, shared);
    for (int64_t j = threadIdx.x; j < r.tk; j += blockDim.x) {
      masked(r, mask, row, j, 0.0f, &filled);
      g[j] = filled ? 0.0f : pr[j] * (g[j] - dot);
    }
  }
}

__global__ void attention_bias_kernel(AttentionRows r, AttentionMask mask, FloatView bias) {
  bool filled = false;
  const int64_t total = r.batches * r.t * r.tk;
  PIPER_GRID_STRIDE_LOOP(e, total) {
    bias.store(e, masked(r, mask, e / r.tk, e % r.tk, 0.0f, &filled));
  }
}

__global__ void row_log_sum_exp_kernel(int64_t rows, const float* row_max, const float* row_inv_sum,
                                       float* lse) {
  PIPER_GRID_STRIDE_LOOP(r, rows) { lse[r] = row_max[r] - logf(row_inv_sum[r]); }
}

__global__ void fill_kernel(int64_t n, float value, float* out) {
  PIPER_GRID_STRIDE_LOOP(i, n) { out[i] = value; }
}

unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>(rows < 1 ? 1 : (rows > (1 << 20) ? (1 << 20) : rows));
}

}  // namespace

void launch_bias_gelu(Gelu gelu, int64_t total, int64_t n, FloatView x, FloatView bias, FloatView y,
                      cudaStream_t stream) {
  if (total == 0) return;
  bias_gelu_kernel<<<blocks_for(total), kThreads, 0, stream>>>(gelu, total, n, x, bias, y);
  PIPER_CUDA_LAUNCH_CHECK("bias_gelu_kernel");
}

void launch_bias_gelu_grad(Gelu gelu, int64_t total, int64_t n, FloatView dy, FloatView x,
                           FloatView bias, FloatView dx, cudaStream_t stream) {
  if (total == 0) return;
  bias_gelu_grad_kernel<<<blocks_for(total), kThreads, 0, stream>>>(gelu, total, n, dy, x, bias,
                                                                    dx);
  PIPER_CUDA_LAUNCH_CHECK("bias_gelu_grad_kernel");
}

void launch_attention_softmax(const AttentionRows& rows, const AttentionMask& mask, float* s,
                              float* row_max, float* row_inv_sum, cudaStream_t stream) {
  if (rows.batches * rows.t == 0 || rows.tk == 0) return;
  attention_softmax_kernel<<<row_blocks(rows.batches * rows.t), kThreads, 0, stream>>>(
      rows, mask, s, row_max, row_inv_sum);
  PIPER_CUDA_LAUNCH_CHECK("attention_softmax_kernel");
}

void launch_attention_probabilities(const AttentionRows& rows, const AttentionMask& mask, float* s,
                                    const float* row_max, const float* row_inv_sum,
                                    cudaStream_t stream) {
  const int64_t total = rows.batches * rows.t * rows.tk;
  if (total == 0) return;
  attention_probabilities_kernel<<<blocks_for(total), kThreads, 0, stream>>>(rows, mask, s, row_max,
                                                                             row_inv_sum);
  PIPER_CUDA_LAUNCH_CHECK("attention_probabilities_kernel");
}

void launch_attention_score_grad(const AttentionRows& rows, const AttentionMask& mask,
                                 const float* p, float* dp, const RowOutputs& y,
                                 cudaStream_t stream) {
  if (rows.batches * rows.t == 0 || rows.tk == 0) return;
  attention_score_grad_kernel<<<row_blocks(rows.batches * rows.t), kThreads, 0, stream>>>(
      rows, mask, p, dp, y);
  PIPER_CUDA_LAUNCH_CHECK("attention_score_grad_kernel");
}

void launch_attention_bias(const AttentionRows& rows, const AttentionMask& mask, FloatView bias,
                           cudaStream_t stream) {
  const int64_t total = rows.batches * rows.t * rows.tk;
  if (total == 0) return;
  attention_bias_kernel<<<blocks_for(total), kThreads, 0, stream>>>(rows, mask, bias);
  PIPER_CUDA_LAUNCH_CHECK("attention_bias_kernel");
}

void launch_row_log_sum_exp(int64_t rows, const float* row_max, const float* row_inv_sum,
                            float* lse, cudaStream_t stream) {
  if (rows == 0) return;
  row_log_sum_exp_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(rows, row_max, row_inv_sum,
                                                                    lse);
  PIPER_CUDA_LAUNCH_CHECK("row_log_sum_exp_kernel");
}

void launch_fill(int64_t n, float value, float* out, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, value, out);
  PIPER_CUDA_LAUNCH_CHECK("fill_kernel");
}

}  // namespace piper::engine::cuda
