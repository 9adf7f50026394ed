// How the scatters (ScatterND, ScatterElements) combine an update with the element it lands
// on: the attribute `reduction` (op_checks.h's check_scatter_reduction reads it), shared by the
// CPU kernels and the CUDA ones (engine/cuda/scatter.cuh).
#pragma once

#include "engine/cpu/host_device.h"

namespace piper::engine::cpu {

// none: the update replaces the element; add and mul take float32 or int64 data only.
enum class ScatterReduction { kNone, kAdd, kMul };

template <typename T>
PIPER_HOST_DEVICE inline void combine_update(ScatterReduction reduction, T& element, T update) {
  switch (reduction) {
    case ScatterReduction::kNone:
      element = update;
      break;
    case ScatterReduction::kAdd:
      element = static_cast<T>(element + update);
      break;
    case ScatterReduction::kMul:
      element = static_cast<T>(element * update);
      break;
  }
}

}  // namespace piper::engine::cpu
