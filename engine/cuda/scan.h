// Launcher of CumSum (scan.cu): each line summed in order, as the CPU kernel does, so that
// both give the same bits. Issues one kernel to `stream` and checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/fault.h"

namespace piper::engine::cuda {

// A tensor's shape, passed to kernels by value.
struct ScanShape {
  static constexpr int kMaxRank = 8;
  int rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t elements = 0;
};

// y = the cumulative sums of x (`int64` or float32, summed in double) along the axis *axis
// (negative counts from the end): `exclusive` leaves out the element itself, `reverse` sums
// from the end. An axis out of range reports `fault_code` with the axis as the value.
void launch_cum_sum(const ScanShape& shape, bool int64, bool exclusive, bool reverse,
                    const int64_t* axis, const void* x, void* y, DeviceFault* fault,
                    int32_t fault_code, cudaStream_t stream);

}  // namespace piper::engine::cuda
