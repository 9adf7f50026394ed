// An index space walked on the device by one thread per element: its dimensions
// (size-1 ones dropped, neighbours merged where every operand allows) and each
// operand's element strides over them. Passed to kernels by value.
#pragma once

#include <cstdint>

namespace piper::engine::cuda {

struct StridedIndex {
  static constexpr int kMaxDims = 8;
  static constexpr int kMaxOperands = 4;

  int rank = 0;
  int operands = 0;
  int64_t total = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};

#ifdef __CUDACC__
  // The element offset of each operand at linear (C-order) position `i`.
  __device__ void offsets(int64_t i, int64_t* out) const {
    for (int k = 0; k < operands; ++k) out[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t coordinate = i % sizes[d];
      i /= sizes[d];
      for (int k = 0; k < operands; ++k) out[k] += coordinate * strides[k][d];
    }
  }
#endif
};

}  // namespace piper::engine::cuda
