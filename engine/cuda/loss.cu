// SoftmaxCrossEntropyLoss: one block per position (i, j) computes the log-sum-exp
// over the C classes in double (as the CPU kernel does); a one-block kernel folds the
// positions' losses and weights for the sum and mean reductions.
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
    if (s.reduction == LossReduction::kNone) {
      out[p] = static_cast<float>(value);
    } else {
      values[p] = value;
      weights[p] = w;
    }
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
    const double upstream = s.reduction == LossReduction::kNone ? dl[p] : dl[0];
    const double scale = s.reduction == LossReduction::kMean ? 1.0 / *weight_sum : 1.0;
    const double factor = upstream * scale * w;
    const double lse = log_sum_exp(x, s.c, s.d, shared);
    for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x) {
      const double prob = exp(static_cast<double>(x[k * s.d]) - lse);
      dx[k * s.d] = static_cast<float>(factor * (prob - (k == label ? 1.0 : 0.0)));
    }
  }
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
  if (loss.reduction == LossReduction::kNone) return;
  // The totals reuse the first two partials once folded: fold_kernel reads all before writing.
  fold_kernel<<<1, 1024, 0, stream>>>(positions, values, weights, scratch, scratch + 1);
  PIPER_CUDA_LAUNCH_CHECK("fold_kernel");
  finish_loss_kernel<<<1, 1, 0, stream>>>(loss.reduction, scratch, scratch + 1, out);
  PIPER_CUDA_LAUNCH_CHECK("finish_loss_kernel");
}

void launch_softmax_cross_entropy_grad(const ClassLoss& loss, const float* dl, float* dscores,
                                       double* scratch, cudaStream_t stream) {
  const int64_t positions = loss.n * loss.d;
  if (positions == 0) return;
  if (loss.reduction == LossReduction::kMean) {
    weight_sum_kernel<<<1, 1024, 0, stream>>>(loss, scratch);
    PIPER_CUDA_LAUNCH_CHECK("weight_sum_kernel");
  }
  loss_grad_kernel<<<position_blocks(positions), kThreads, 0, stream>>>(loss, dl, scratch, dscores);
  PIPER_CUDA_LAUNCH_CHECK("loss_grad_kernel");
}

}  // namespace piper::engine::cuda
