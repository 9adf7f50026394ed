// Row-wise normalizations: one block per row (grid-stride over rows), block
// reductions for the row's max and sums. LayerNorm's dScale and dBias are column sums
// over rows: thread (column, chunk) folds its chunk of rows, so reads coalesce, and a
// second kernel combines the chunks.
#include "engine/cuda/device.cuh"
#include "engine/cuda/normalization.h"

namespace piper::engine::cuda {
namespace {

unsigned int row_threads(int64_t n) {
  unsigned int threads = 32;
  while (threads < 256 && threads < n) threads *= 2;
  return threads;
}

unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>(rows < 1 ? 1 : (rows > 65535 * 16 ? 65535 * 16 : rows));
}

__device__ int64_t row_base(const AxisRows& r, int64_t row) {
  return (row / r.inner) * r.n * r.inner + row % r.inner;
}

__global__ void softmax_kernel(bool log, AxisRows r, const float* x, float* y) {
  __shared__ float shared[32];
  for (int64_t row = blockIdx.x; row < r.outer * r.inner; row += gridDim.x) {
    const int64_t base = row_base(r, row);
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) m = fmaxf(m, x[base + i * r.inner]);
    m = block_max(m, shared);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) sum += expf(x[base + i * r.inner] - m);
    sum = block_sum(sum, shared);
    const float log_sum = logf(sum), scale = 1.0f / sum;
    for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
      const float shifted = x[base + i * r.inner] - m;
      y[base + i * r.inner] = log ? shifted - log_sum : expf(shifted) * scale;
    }
  }
}

__global__ void softmax_grad_kernel(bool log, AxisRows r, const float* dy, const float* y,
                                    float* dx) {
  __shared__ float shared[32];
  for (int64_t row = blockIdx.x; row < r.outer * r.inner; row += gridDim.x) {
    const int64_t base = row_base(r, row);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
      const int64_t at = base + i * r.inner;
      sum += log ? dy[at] : dy[at] * y[at];
    }
    sum = block_sum(sum, shared);
    for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
      const int64_t at = base + i * r.inner;
      dx[at] = log ? dy[at] - expf(y[at]) * sum : y[at] * (dy[at] - sum);
    }
  }
}

__global__ void layer_norm_kernel(int64_t rows, int64_t n, float epsilon, const float* x,
                                  const float* scale, const float* bias, float* y, float* mean_out,
                                  float* inv_out) {
  __shared__ float shared[32];
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* in = x + row * n;
    float* out = y + row * n;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += in[i];
    const float mean = block_sum(sum, shared) * inv_n;
    float squares = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float centered = in[i] - mean;
      squares += centered * centered;
    }
    const float inv = 1.0f / sqrtf(block_sum(squares, shared) * inv_n + epsilon);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = (in[i] - mean) * inv * scale[i];
      out[i] = bias != nullptr ? v + bias[i] : v;
    }
    if (threadIdx.x == 0) {
      if (mean_out != nullptr) mean_out[row] = mean;
      if (inv_out != nullptr) inv_out[row] = inv;
    }
  }
}

__global__ void layer_norm_dx_kernel(int64_t rows, int64_t n, const float* dy, const float* x,
                                     const float* scale, const float* mean, const float* inv_std,
                                     float* dx) {
  __shared__ float shared[32];
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* d = dy + row * n;
    const float* in = x + row * n;
    const float m = mean[row], inv = inv_std[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float g = d[i] * scale[i];
      sum_g += g;
      sum_gx += g * (in[i] - m) * inv;
    }
    const float mean_g = block_sum(sum_g, shared) * inv_n;
    const float mean_gx = block_sum(sum_gx, shared) * inv_n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float xhat = (in[i] - m) * inv;
      dx[row * n + i] = inv * (d[i] * scale[i] - mean_g - xhat * mean_gx);
    }
  }
}

// Thread (column, chunk): the chunk's Σ dY·x̂ and Σ dY for its column.
__global__ void layer_norm_columns_kernel(int64_t rows, int64_t n, const float* dy, const float* x,
                                          const float* mean, const float* inv_std, int chunks,
                                          float* dscale, float* dbias, double* partials) {
  const int64_t length = (rows + chunks - 1) / chunks;
  const int64_t begin = blockIdx.y * length;
  const int64_t end = begin + length < rows ? begin + length : rows;
  PIPER_GRID_STRIDE_LOOP(column, n) {
    double sum_scale = 0.0, sum_bias = 0.0;
    for (int64_t row = begin; row < end; ++row) {
      const float d = dy[row * n + column];
      sum_scale += d * ((x[row * n + column] - mean[row]) * inv_std[row]);
      sum_bias += d;
    }
    if (chunks == 1) {
      if (dscale != nullptr) dscale[column] = static_cast<float>(sum_scale);
      if (dbias != nullptr) dbias[column] = static_cast<float>(sum_bias);
    } else {
      partials[blockIdx.y * n + column] = sum_scale;
      partials[(chunks + blockIdx.y) * n + column] = sum_bias;
    }
  }
}

__global__ void layer_norm_combine_kernel(int64_t n, int chunks, const double* partials,
                                          float* dscale, float* dbias) {
  PIPER_GRID_STRIDE_LOOP(column, n) {
    double sum_scale = 0.0, sum_bias = 0.0;
    for (int c = 0; c < chunks; ++c) {
      sum_scale += partials[c * n + column];
      sum_bias += partials[(chunks + c) * n + column];
    }
    if (dscale != nullptr) dscale[column] = static_cast<float>(sum_scale);
    if (dbias != nullptr) dbias[column] = static_cast<float>(sum_bias);
  }
}

}  // namespace

void launch_softmax(bool log, const AxisRows& rows, const float* x, float* y, cudaStream_t stream) {
  const int64_t count = rows.outer * rows.inner;
  if (count == 0 || rows.n == 0) return;
  softmax_kernel<<<row_blocks(count), row_threads(rows.n), 0, stream>>>(log, rows, x, y);
  PIPER_CUDA_LAUNCH_CHECK("softmax_kernel");
}

void launch_softmax_grad(bool log, const AxisRows& rows, const float* dy, const float* y, float* dx,
                         cudaStream_t stream) {
  const int64_t count = rows.outer * rows.inner;
  if (count == 0 || rows.n == 0) return;
  softmax_grad_kernel<<<row_blocks(count), row_threads(rows.n), 0, stream>>>(log, rows, dy, y, dx);
  PIPER_CUDA_LAUNCH_CHECK("softmax_grad_kernel");
}

void launch_layer_norm(int64_t rows, int64_t n, float epsilon, const float* x, const float* scale,
                       const float* bias, float* y, float* mean, float* inv_std,
                       cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  layer_norm_kernel<<<row_blocks(rows), row_threads(n), 0, stream>>>(rows, n, epsilon, x, scale,
                                                                     bias, y, mean, inv_std);
  PIPER_CUDA_LAUNCH_CHECK("layer_norm_kernel");
}

void launch_layer_norm_grad(int64_t rows, int64_t n, const float* dy, const float* x,
                            const float* scale, const float* mean, const float* inv_std, float* dx,
                            float* dscale, float* dbias, int chunks, double* partials,
                            cudaStream_t stream) {
  if (n == 0) return;
  if (dx != nullptr && rows > 0) {
    layer_norm_dx_kernel<<<row_blocks(rows), row_threads(n), 0, stream>>>(rows, n, dy, x, scale,
                                                                          mean, inv_std, dx);
    PIPER_CUDA_LAUNCH_CHECK("layer_norm_dx_kernel");
  }
  if (dscale == nullptr && dbias == nullptr) return;
  const dim3 grid(blocks_for(n), static_cast<unsigned int>(chunks));
  layer_norm_columns_kernel<<<grid, kThreads, 0, stream>>>(rows, n, dy, x, mean, inv_std, chunks,
                                                           dscale, dbias, partials);
  PIPER_CUDA_LAUNCH_CHECK("layer_norm_columns_kernel");
  if (chunks > 1) {
    layer_norm_combine_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, chunks, partials, dscale,
                                                                      dbias);
    PIPER_CUDA_LAUNCH_CHECK("layer_norm_combine_kernel");
  }
}

}  // namespace piper::engine::cuda
