// Launchers of Dropout and piper.DropoutGrad (dropout.cu), which draw the CPU kernel's masks
// bit for bit (engine/cpu/dropout_stream.h). The mode's ratio and training_mode point to
// device memory and are read on the device, as the CPU kernel reads them at run time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cpu/dropout_stream.h"
#include "engine/cuda/fault.h"

namespace piper::engine::cuda {

// y = x with the dropped elements zeroed and the kept ones scaled, or a copy of x outside
// training; mask (may be null) = 1 where kept. `key` is dropout::step_key()'s and `box` places
// the elements in the whole tensor. A ratio outside [0, 1] in training reports `fault_code`
// with the ratio's bits as the value.
void launch_dropout(dropout::Mode mode, uint64_t key, const dropout::Box& box, int64_t n,
                    const float* x, float* y, uint8_t* mask, DeviceFault* fault, int32_t fault_code,
                    cudaStream_t stream);
// dx = mask ? dy * scale : 0.
void launch_dropout_grad(dropout::Mode mode, int64_t n, const float* dy, const uint8_t* mask,
                         float* dx, cudaStream_t stream);

}  // namespace piper::engine::cuda
