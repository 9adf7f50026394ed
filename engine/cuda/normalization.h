// Launchers of the row-wise normalizations (normalization.cu): Softmax and
// LogSoftmax along an axis and their gradients, LayerNormalization and its gradient.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace piper::engine::cuda {

// A tensor as [outer, n, inner] around the normalized axis: rows = outer * inner rows of n
// elements, `inner` apart.
struct AxisRows {
  int64_t outer = 1, n = 1, inner = 1;
};

// y = softmax(x) (log_softmax when `log`) along the axis.
void launch_softmax(bool log, const AxisRows& rows, const float* x, float* y, cudaStream_t stream);
// dx = y · (dy − Σ dy·y) for softmax; dx = dy − exp(y) · Σ dy for log_softmax.
void launch_softmax_grad(bool log, const AxisRows& rows, const float* dy, const float* y, float* dx,
                         cudaStream_t stream);

// X as [rows, n]: y = (x − mean) · inv_std · scale + bias (bias optional); mean and inv_std
// (one per row) are written when not null.
void launch_layer_norm(int64_t rows, int64_t n, float epsilon, const float* x, const float* scale,
                       const float* bias, float* y, float* mean, float* inv_std,
                       cudaStream_t stream);

// Its gradient, each output optional (null). dscale and dbias fold the rows in `chunks` chunks;
// partials holds 2 * chunks * n doubles when chunks > 1.
void launch_layer_norm_grad(int64_t rows, int64_t n, const float* dy, const float* x,
                            const float* scale, const float* mean, const float* inv_std, float* dx,
                            float* dscale, float* dbias, int chunks, double* partials,
                            cudaStream_t stream);

}  // namespace piper::engine::cuda
