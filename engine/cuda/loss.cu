// SoftmaxCrossEntropyLoss: one block per position (i, j) computes the log-sum-exp
// over the C classes in double (as the CPU kernel does); a one-block kernel folds the
// positions' losses and weights for the sum and mean reductions.
// NegativeLogLikelihoodLoss: one thread per position reads its label's input, folded
// the same way; its gradient zeroes dInput and writes each position's label entry.
#include "engine/cuda/device.cuh"
#include "engine/cuda/loss.h"

namespace piper::engine::cuda {
namespace {

unsigned int position_blocks(int64_t positions) {
  return static_cast<unsigned int>(positions < 1 ? 1
                                                 : (positions > (1 << 20) ? (1 << 20) : positions));
}

// The weight of position p's label (0 when ignored or out of range); sets *label.
__device__ float label_weight(const ClassLoss& s, int64_t p, int64_t* label) {
  *label = s.labels[p];
  if (s.has_ignore && *label == s.ignore_index) return 0.0f;
  if (*label < 0 || *label >= s.c) {
    report_fault(s.fault, s.fault_code, *label, p);
    return 0.0f;
  }
  return s.weights != nullptr ? s.weights[*label] : 1.0f;
}

// Position p's loss and label weight: the output for kNone, else the partials fold_kernel sums.
__device__ void store_loss(const ClassLoss& s, int64_t p, double value, float w, float* out,
                           double* values, double* weights) {
  if (s.reduction == LossReduction::kNone) {
    out[p] = static_cast<float>(value);
  } else {
    values[p] = value;
    weights[p] = w;
  }
}

// dL(i, j) at position p (dl[p] for kNone, else dl[0]), divided by the sum of the label
// weights for kMean.
__device__ double upstream(const ClassLoss& s, const float* dl, const double* weight_sum,
                           int64_t p) {
  const double value = s.reduction == LossReduction::kNone ? dl[p] : dl[0];
  return s.reduction == LossReduction::kMean ? value * (1.0 / *weight_sum) : value;
}

// log Σ_k exp(x[k·d]) over the block, in double.
__device__ double log_sum_exp(const float* x, int64_t c, int64_t d, double* shared) {
  float m = -INFINITY;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x) m = fmaxf(m, x[k * d]);
  m = block_max(m, reinterpret_cast<float*>(shared));
  double sum = 0.0;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
    sum += exp(static_cast<double>(x[k * d] - m));
  return static_cast<double>(m) + log(block_sum(sum, shared));
}

__global__ void loss_kernel(ClassLoss s, float* out, float* log_prob, double* values,
                            double* weights) {
  __shared__ double shared[32];
  for (int64_t p = blockIdx.x; p < s.n * s.d; p += gridDim.x) {
    const int64_t i = p / s.d, j = p % s.d;
    const float* x = s.scores + i * s.c * s.d + j;
    const double lse = log_sum_exp(x, s.c, s.d, shared);
    if (log_prob != nullptr) {
      float* lp = log_prob + i * s.c * s.d + j;
      for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x) {
        lp[k * s.d] = static_cast<float>(x[k * s.d] - lse);
      }
    }
    if (threadIdx.x != 0) continue;
    int64_t label = 0;
    const float w = label_weight(s, p, &label);
    const double value = w == 0.0f ? 0.0 : -(x[label * s.d] - lse) * w;
    store_loss(s, p, value, w, out, values, weights);
  }
}

__global__ void nll_kernel(ClassLoss s, float* out, double* values, double* weights) {
  PIPER_GRID_STRIDE_LOOP(p, s.n * s.d) {
    const int64_t i = p / s.d, j = p % s.d;
    int64_t label = 0;
    const float w = label_weight(s, p, &label);
    const double value =
        w == 0.0f ? 0.0 : -static_cast<double>(s.scores[(i * s.c + label) * s.d + j]) * w;
    store_loss(s, p, value, w, out, values, weights);
  }
}

// One block: the sum of `count` values (and of `weights` when not null) into *total, *weight.
__global__ void fold_kernel(int64_t count, const double* values, const double* weights,
                            double* total, double* weight) {
  __shared__ double shared[32];
  double v = 0.0, w = 0.0;
  for (int64_t p = threadIdx.x; p < count; p += blockDim.x) {
    v += values[p];
    if (weights != nullptr) w += weights[p];
  }
  v = block_sum(v, shared);
  w = block_sum(w, shared);
  if (threadIdx.x == 0) {
    *total = v;
    if (weight != nullptr) *weight = w;
  }
}

__global__ void finish_loss_kernel(LossReduction reduction, const double* total,
                                   const double* weight, float* out) {
  *out = static_cast<float>(reduction == LossReduction::kMean ? *total / *weight : *total);
}

// One block: Σ of the label weights over every position, for the mean's divisor.
__global__ void weight_sum_kernel(ClassLoss s, double* sum) {
  __shared__ double shared[32];
  double w = 0.0;
  for (int64_t p = threadIdx.x; p < s.n * s.d; p += blockDim.x) {
    int64_t label = 0;
    w += label_weight(s, p, &label);
  }
  w = block_sum(w, shared);
  if (threadIdx.x == 0) *sum = w;
}

__global__ void loss_grad_kernel(ClassLoss s, const float* dl, const double* weight_sum,
                                 float* dscores) {
  __shared__ double shared[32];
  for (int64_t p = blockIdx.x; p < s.n * s.d; p += gridDim.x) {
    const int64_t i = p / s.d, j = p % s.d;
    const float* x = s.scores + i * s.c * s.d + j;
    float* dx = dscores + i * s.c * s.d + j;
    int64_t label = 0;
    const float w = label_weight(s, p, &label);
    if (w == 0.0f) {
      for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x) dx[k * s.d] = 0.0f;
      continue;
    }
    const double factor = upstream(s, dl, weight_sum, p) * w;
    const double lse = log_sum_exp(x, s.c, s.d, shared);
    for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x) {
      const double prob = exp(static_cast<double>(x[k * s.d]) - lse);
      dx[k * s.d] = static_cast<float>(factor * (prob - (k == label ? 1.0 : 0.0)));
    }
  }
}

// dinput (zeroed before) at each position's label: −dL(i, j) · w(label).
__global__ void nll_grad_kernel(ClassLoss s, const float* dl, const double* weight_sum,
                                float* dinput) {
  PIPER_GRID_STRIDE_LOOP(p, s.n * s.d) {
    int64_t label = 0;
    const float w = label_weight(s, p, &label);
    if (w == 0.0f) continue;
    const int64_t i = p / s.d, j = p % s.d;
    dinput[(i * s.c + label) * s.d + j] = static_cast<float>(-upstream(s, dl, weight_sum, p) * w);
  }
}

// The sum and mean reductions of the positions' partials (scratch: values, then weights) into
// *out; nothing for kNone.
void reduce_losses(const ClassLoss& loss, float* out, double* scratch, cudaStream_t stream) {
  if (loss.reduction == LossReduction::kNone) return;
  const int64_t positions = loss.n * loss.d;
  // The totals reuse the first two partials once folded: fold_kernel reads all before writing.
  fold_kernel<<<1, 1024, 0, stream>>>(positions, scratch, scratch + positions, scratch,
                                      scratch + 1);
  PIPER_CUDA_LAUNCH_CHECK("fold_kernel");
  finish_loss_kernel<<<1, 1, 0, stream>>>(loss.reduction, scratch, scratch + 1, out);
  PIPER_CUDA_LAUNCH_CHECK("finish_loss_kernel");
}

// The divisor of the mean reduction's gradient into *scratch; nothing for the others.
void launch_weight_sum(const ClassLoss& loss, double* scratch, cudaStream_t stream) {
  if (loss.reduction != LossReduction::kMean) return;
  weight_sum_kernel<<<1, 1024, 0, stream>>>(loss, scratch);
  PIPER_CUDA_LAUNCH_CHECK("weight_sum_kernel");
}

}  // namespace

void launch_softmax_cross_entropy(const ClassLoss& loss, float* out, float* log_prob,
                                  double* scratch, cudaStream_t stream) {
  const int64_t positions = loss.n * loss.d;
  double* values = scratch;
  double* weights = scratch + positions;
  if (positions > 0) {
    loss_kernel<<<position_blocks(positions), kThreads, 0, stream>>>(loss, out, log_prob, values,
                                                                     weights);
    PIPER_CUDA_LAUNCH_CHECK("loss_kernel");
  }
  reduce_losses(loss, out, scratch, stream);
}

void launch_softmax_cross_entropy_grad(const ClassLoss& loss, const float* dl, float* dscores,
                                       double* scratch, cudaStream_t stream) {
  const int64_t positions = loss.n * loss.d;
  if (positions == 0) return;
  launch_weight_sum(loss, scratch, stream);
  loss_grad_kernel<<<position_blocks(positions), kThreads, 0, stream>>>(loss, dl, scratch, dscores);
  PIPER_CUDA_LAUNCH_CHECK("loss_grad_kernel");
}

void launch_nll_loss(const ClassLoss& loss, float* out, double* scratch, cudaStream_t stream) {
  const int64_t positions = loss.n * loss.d;
  if (positions > 0) {
    nll_kernel<<<blocks_for(positions), kThreads, 0, stream>>>(loss, out, scratch,
                                                               scratch + positions);
    PIPER_CUDA_LAUNCH_CHECK("nll_kernel");
  }
  reduce_losses(loss, out, scratch, stream);
}

void launch_nll_loss_grad(const ClassLoss& loss, const float* dl, float* dinput, double* scratch,
                          cudaStream_t stream) {
  const int64_t total = loss.n * loss.c * loss.d, positions = loss.n * loss.d;
  if (total > 0) PIPER_CUDA_CHECK(cudaMemsetAsync(dinput, 0, total * sizeof(float), stream));
  if (positions == 0) return;
  launch_weight_sum(loss, scratch, stream);
  nll_grad_kernel<<<blocks_for(positions), kThreads, 0, stream>>>(loss, dl, scratch, dinput);
  PIPER_CUDA_LAUNCH_CHECK("nll_grad_kernel");
}

}  // namespace piper::engine::cuda
