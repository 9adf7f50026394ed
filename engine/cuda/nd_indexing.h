// Launchers of GatherND, piper.GatherNDGrad and ScatterND (nd_indexing.cu), over
// cpu::NdGeometry (engine/cpu/op_checks.h): tuple n of batch n / tuples addresses a slice of
// `slice` contiguous data elements; the gathered tensor (or the updates) is [tuples, slice].
// One thread per gathered (or scattered) element; an index out of range reports `fault_code`
// with the index and its position in the indices instead of reading or writing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/cpu/scatter_reduction.h"
#include "engine/cuda/fault.h"

namespace piper::engine::cuda {

struct NdIndex {
  static constexpr int kMaxTuple = 8;

  int64_t tuples = 0;  // in all batches
  int64_t per_batch = 1;
  int64_t slice = 1;
  int64_t batch_stride = 0;
  int k = 0;
  int64_t dims[kMaxTuple] = {};
  int64_t strides[kMaxTuple] = {};
  DeviceFault* fault = nullptr;
  int32_t fault_code = 0;
};

// out[n, :] = data[tuple n's slice] for elements of 1, 2, 4 or 8 bytes.
void launch_gather_nd(const NdIndex& index, size_t element_bytes, const void* data,
                      const int64_t* indices, void* out, cudaStream_t stream);
// out[tuple n's slice] (reduction)= updates[n, :], out holding the data (or zeros) before.
// Elements of 1, 2, 4 or 8 bytes; add and mul only for float32 (4) or int64 (8), with atomics.
void launch_scatter_nd(const NdIndex& index, size_t element_bytes, cpu::ScatterReduction reduction,
                       const int64_t* indices, const void* updates, void* out, cudaStream_t stream);

}  // namespace piper::engine::cuda
