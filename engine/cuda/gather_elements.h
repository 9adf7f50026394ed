// Launchers of GatherElements, piper.GatherElementsGrad and ScatterElements
// (gather_elements.cu): one thread per index; an index out of range reports `fault_code` with the
// index and its position. Each issues one kernel to `stream` and checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/cpu/scatter_reduction.h"
#include "engine/cuda/fault.h"
#include "engine/cuda/strided.h"

namespace piper::engine::cuda {

struct ElementsIndex {
  // Over the indices' shape: operand 0 the indices (and the gathered tensor, contiguous),
  // operand 1 the data with the axis' stride 0.
  StridedIndex index;
  int64_t axis_size = 0;
  int64_t axis_stride = 0;  // the data's stride along the axis
  DeviceFault* fault = nullptr;
  int32_t fault_code = 0;
};

// y[e] = x[the data position of index e] for elements of 1, 2, 4 or 8 bytes.
void launch_gather_elements(const ElementsIndex& g, size_t element_bytes, const void* x,
                            const int64_t* indices, void* y, cudaStream_t stream);
// dx[the data position of index e] += dy[e], with atomics (dx zeroed before).
void launch_gather_elements_grad(const ElementsIndex& g, const float* dy, const int64_t* indices,
                                 float* dx, cudaStream_t stream);

// y[the data position of index e] (reduction)= updates[e], y holding the data before. Elements
// of 1, 2, 4 or 8 bytes; add and mul only for float32 (4) or int64 (8), with atomics.
void launch_scatter_elements(const ElementsIndex& g, size_t element_bytes,
                             cpu::ScatterReduction reduction, const int64_t* indices,
                             const void* updates, void* y, cudaStream_t stream);

}  // namespace piper::engine::cuda
