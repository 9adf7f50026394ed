// piper.FusedAttention's operands as its CUDA kernels take them (engine/cuda/fused_ops.cc runs
// them through cuBLASLt, engine/cuda/cudnn_attention.cc through cuDNN): the geometry checked by
// the CPU's engine/cpu/attention_geometry.h, the mask as the device kernels read it, and how the
// products run.
#pragma once

#include <library_types.h>

#include <cstdint>
#include <memory>

#include "engine/cpu/attention_geometry.h"
#include "engine/cuda/context.h"
#include "engine/cuda/fused.h"
#include "engine/cuda/registry.h"

namespace piper::engine::cuda {

// Q, Kt, V (and Y, dY and the gradients) are all float32 or all bfloat16.
struct Attention : cpu::AttentionGeometry {
  AttentionMask device_mask;  // the mask as the kernels read it
  std::shared_ptr<int64_t> mask_offsets_on_device;
  cudaDataType_t type = CUDA_R_32F;  // of the operands
  size_t element_bytes = 4;
  bool tf32 = false;
  uint32_t alignment = 256;  // of every operand of the products
};

// Checks Q, Kt, V (inputs first..first+2) and the optional mask (input first+3), failing naming
// the operand at fault, and copies the mask's per-batch offsets to the device.
Attention attention(const KernelArgs& args, CudaContext& context, size_t first);

}  // namespace piper::engine::cuda
