// Launchers of the kernels behind the planner's fused ops (fused.cu): piper.BiasGelu and
// its gradient, and the row-wise parts of piper.FusedAttention and its gradient (the
// products go through cuBLASLt, engine/cuda/gemm.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/float_view.h"

namespace piper::engine::cuda {

// GELU(h) = h · Φ(h): exactly (erf) or by its tanh approximation.
enum class Gelu { kErf, kTanh };

// y = GELU(x + bias) over `total` elements; bias (optional: null data) has `n` elements, one per
// element of x's last dimension.
void launch_bias_gelu(Gelu gelu, int64_t total, int64_t n, FloatView x, FloatView bias, FloatView y,
                      cudaStream_t stream);
// dx = dy · GELU'(x + bias).
void launch_bias_gelu_grad(Gelu gelu, int64_t total, int64_t n, FloatView dy, FloatView x,
                           FloatView bias, FloatView dx, cudaStream_t stream);

// How attention scores are masked: a float mask (float32 or bfloat16) is added, a bool mask
// sets a score to `fill` where it equals `fill_if`. Element (b, i, j) of the mask is at
// offsets[b] + i · row_stride + j · key_stride (offsets: device memory, one per batch index).
struct AttentionMask {
  enum class Kind { kNone, kAdd, kFill } kind = Kind::kNone;
  void* data = nullptr;
  bool bf16 = false;  // kAdd: the mask is bfloat16
  const int64_t* offsets = nullptr;
  int64_t row_stride = 0, key_stride = 0;
  float fill = 0.0f;
  bool fill_if = true;
};

// Rows of scores of batch indices [first_batch, first_batch + batches), each [t, tk]. Scores,
// probabilities and their gradients are float32 whatever attention's operands are.
struct AttentionRows {
  int64_t first_batch = 0, batches = 0, t = 0, tk = 0;
};

// In place: scores S (already scaled) become probabilities P = softmax(masked S) by rows;
// each row's max and 1 / Σ exp(S − max) are written to row_max / row_inv_sum (offset by the
// first row of the chunk) when not null.
void launch_attention_softmax(const AttentionRows& rows, const AttentionMask& mask, float* s,
                              float* row_max, float* row_inv_sum, cudaStream_t stream);
// In place: scores S become P = exp(masked S − row_max) · row_inv_sum (the forward's P).
void launch_attention_probabilities(const AttentionRows& rows, const AttentionMask& mask, float* s,
                                    const float* row_max, const float* row_inv_sum,
                                    cudaStream_t stream);
// The forward's output Y [..., T, dv] and its gradient dY, from which a row's Σ_keys dP·P is
// dY·Y; omitted (null data) where the op has no Y.
struct RowOutputs {
  FloatView dy, y;
  int64_t dv = 0;
};

// In place: dP becomes dS = P · (dP − Σ_keys dP·P), 0 where a bool mask filled the score; the
// sum is dY·Y where `y` is given.
void launch_attention_score_grad(const AttentionRows& rows, const AttentionMask& mask,
                                 const float* p, float* dp, const RowOutputs& y,
                                 cudaStream_t stream);

// The mask as an additive bias [rows.batches, t, tk] (from rows.first_batch): a float mask's
// values, and for a bool mask `fill` where it equals `fill_if` and 0 elsewhere, which masks as
// setting does when `fill` is −inf. For kernels that take a bias, not a mask (cuDNN's).
void launch_attention_bias(const AttentionRows& rows, const AttentionMask& mask, FloatView bias,
                           cudaStream_t stream);
// lse[r] = row_max[r] − log(row_inv_sum[r]) over `rows` rows: log Σ exp(S) of each row, the
// single statistic flash-attention backwards take (P = exp(S − lse)).
void launch_row_log_sum_exp(int64_t rows, const float* row_max, const float* row_inv_sum,
                            float* lse, cudaStream_t stream);
// out[i] = value for i < n.
void launch_fill(int64_t n, float value, float* out, cudaStream_t stream);

}  // namespace piper::engine::cuda
