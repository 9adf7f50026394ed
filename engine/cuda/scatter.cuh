// Device-side combination of a scattered update with its element (ScatterND,
// ScatterElements), atomic so that threads may land on one element: add and mul for float32
// and int64 (the only dtypes the host checks let them take), a plain store for none, where
// which of several updates to one element lands last is unspecified.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cpu/scatter_reduction.h"

namespace piper::engine::cuda {

using cpu::ScatterReduction;

__device__ inline void combine_atomic(ScatterReduction reduction, float* element, float update) {
  if (reduction == ScatterReduction::kNone) {
    *element = update;
  } else if (reduction == ScatterReduction::kAdd) {
    atomicAdd(element, update);
  } else {
    auto* bits = reinterpret_cast<int*>(element);
    int old = *bits, assumed = 0;
    do {
      assumed = old;
      old = atomicCAS(bits, assumed, __float_as_int(__int_as_float(assumed) * update));
    } while (assumed != old);
  }
}

__device__ inline void combine_atomic(ScatterReduction reduction, int64_t* element,
                                      int64_t update) {
  auto* bits = reinterpret_cast<unsigned long long*>(element);  // NOLINT(runtime/int)
  if (reduction == ScatterReduction::kNone) {
    *element = update;
  } else if (reduction == ScatterReduction::kAdd) {
    atomicAdd(bits, static_cast<unsigned long long>(update));  // NOLINT(runtime/int)
  } else {
    unsigned long long old = *bits, assumed = 0;  // NOLINT(runtime/int)
    do {
      assumed = old;
      old = atomicCAS(bits, assumed,
                      static_cast<unsigned long long>(  // NOLINT(runtime/int)
                          static_cast<int64_t>(assumed) * update));
    } while (assumed != old);
  }
}

// Other element types take reduction none only.
template <typename T>
__device__ void combine_atomic(ScatterReduction, T* element, T update) {
  *element = update;
}

}  // namespace piper::engine::cuda
