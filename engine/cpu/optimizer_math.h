// The gradient-clipping factor both backends' update kernels apply (the CUDA kernels on the
// device, where the gradient norm is).
#pragma once

#include "engine/cpu/host_device.h"

namespace piper::engine::cpu {

// torch.nn.utils.clip_grad_norm_'s factor min(1, max_norm / (norm + 1e-6)) in float32, as
// PyTorch computes it on the float32 norm; 1 when max_norm is 0 (no clipping).
PIPER_HOST_DEVICE inline float clip_scale(float max_norm, float norm) {
  if (max_norm == 0.0f) return 1.0f;
  const float factor = max_norm / (norm + 1e-6f);
  return factor < 1.0f ? factor : 1.0f;
}

}  // namespace piper::engine::cpu
