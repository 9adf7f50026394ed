// Launcher of Trilu (slicing.cu). Slice and its gradient are strided copies
// (elementwise.h's launch_strided_copy).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace piper::engine::cuda {

// The matrices x (elements of 1, 2, 4 or 8 bytes; `total` of them, each matrix rows × cols)
// with the elements outside the upper (j ≥ i + k) or lower (j ≤ i + k) triangle zeroed; k is
// *k, or 0 when k is null.
void launch_trilu(int64_t total, int64_t rows, int64_t cols, bool upper, const int64_t* k,
                  size_t element_bytes, const void* x, void* y, cudaStream_t stream);

}  // namespace piper::engine::cuda
