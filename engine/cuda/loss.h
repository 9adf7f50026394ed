// Launchers of the class-indexed losses, SoftmaxCrossEntropyLoss and
// NegativeLogLikelihoodLoss, and their gradients (loss.cu). Scores (NLL's input) are
// [N, C, D] (D the product of the trailing dimensions), int64 labels [N, D], optional
// per-class weights [C]. A label outside [0, C) that is not ignore_index reports
// `fault_code` and counts as ignored.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/fault.h"

namespace piper::engine::cuda {

enum class LossReduction { kNone, kSum, kMean };

struct ClassLoss {
  int64_t n = 0, c = 0, d = 1;
  LossReduction reduction = LossReduction::kMean;
  bool has_ignore = false;
  int64_t ignore_index = 0;
  const float* scores = nullptr;  // NegativeLogLikelihoodLoss: its input
  const int64_t* labels = nullptr;
  const float* weights = nullptr;  // null: every class weighs 1
  int32_t fault_code = 0;
  DeviceFault* fault = nullptr;
};

// loss: [N, D] for kNone, else one element; log_prob ([N, C, D]) written when not null.
// scratch holds 2 * N * D doubles.
void launch_softmax_cross_entropy(const ClassLoss& loss, float* out, float* log_prob,
                                  double* scratch, cudaStream_t stream);
// dscores = dL(i, j) · w(label) · (softmax − onehot(label)); dl is [N, D] for kNone, else one
// element (divided by the sum of label weights for kMean). scratch holds one double.
void launch_softmax_cross_entropy_grad(const ClassLoss& loss, const float* dl, float* dscores,
                                       double* scratch, cudaStream_t stream);
// NegativeLogLikelihoodLoss: loss(i, j) = −w(label) · input[i, label, j]; out and scratch as
// for launch_softmax_cross_entropy.
void launch_nll_loss(const ClassLoss& loss, float* out, double* scratch, cudaStream_t stream);
// dinput = −dL(i, j) · w(label) · onehot(label); dl and scratch as for
// launch_softmax_cross_entropy_grad.
void launch_nll_loss_grad(const ClassLoss& loss, const float* dl, float* dinput, double* scratch,
                          cudaStream_t stream);

}  // namespace piper::engine::cuda
