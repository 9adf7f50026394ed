// Launchers of the in-place optimizer updates (optimizers.cu), torch.optim semantics as
// engine/cpu/optimizers.cc; the step-dependent factors are computed on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace piper::engine::cuda {

struct AdamWStep {
  float decay = 1.0f;  // 1 − lr · weight_decay
  float beta1 = 0.9f, beta2 = 0.999f, one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;
  float step_size = 0.0f;              // lr / (1 − beta1^t)
  float bias_correction2_sqrt = 1.0f;  // sqrt(1 − beta2^t)
  float epsilon = 1e-8f;
  float max_norm = 0.0f;  // clip_grad_norm (cpu::clip_scale), 0: no clipping
};

// `norm`, the global gradient norm on the device, may be null; when it is not finite the
// update changes nothing, else the gradient is scaled by cpu::clip_scale(max_norm, *norm).
void launch_adamw(const AdamWStep& step, int64_t n, float* p, const float* g, float* m, float* v,
                  const float* norm, cudaStream_t stream);

struct SgdStep {
  float lr = 0.0f, momentum = 0.0f, keep = 1.0f /* 1 − dampening */, weight_decay = 0.0f;
  float max_norm = 0.0f;  // as for AdamWStep
  bool nesterov = false;
  bool first = false;  // the first step seeds the momentum buffer with the gradient
};

// m is null without momentum; `norm` as for launch_adamw.
void launch_sgd(const SgdStep& step, int64_t n, float* p, const float* g, float* m,
                const float* norm, cudaStream_t stream);

// Blocks of each slice's sum in launch_sum_squares: `partials` holds this many doubles per
// slice.
constexpr int kSumSquaresBlocks = 256;

// *y = the sum over slices i of x[i][0, counts[i])², in double, by a fixed number of blocks
// per slice added in order (the result does not depend on timing).
void launch_sum_squares(const std::vector<const float*>& x, const std::vector<int64_t>& counts,
                        double* partials, float* y, cudaStream_t stream);

}  // namespace piper::engine::cuda
