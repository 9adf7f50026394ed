// Launchers of the gathers (indexing.cu): ONNX Gather and its adjoint piper.GatherGrad
// (a scatter-add into zeros). Data is [outer, axis, inner], the gathered tensor
// [outer, count, inner]; a negative index counts from the end of the axis, and one out of
// range reports `fault_code` (CudaContext::fault_code) instead of reading or writing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/fault.h"

namespace piper::engine::cuda {

struct GatherShape {
  int64_t outer = 1, axis = 0, inner = 1, count = 0;
  int32_t fault_code = 0;
  DeviceFault* fault = nullptr;
};

// out[o, j, :] = data[o, indices[j], :] for elements of 1, 4 or 8 bytes.
void launch_gather(const GatherShape& shape, size_t element_bytes, const void* data,
                   const int64_t* indices, void* out, cudaStream_t stream);
// dx = 0, then dx[o, indices[j], :] += dy[o, j, :] (float32; atomics: the order of additions
// to one row varies).
void launch_gather_grad(const GatherShape& shape, const float* dy, const int64_t* indices,
                        float* dx, cudaStream_t stream);

}  // namespace piper::engine::cuda
