// The orders ArgMax, ArgMin and TopK select by, and the lines they select along, shared by the CPU
// kernels (indexing.cc) and the CUDA ones (engine/cuda/selection.cu), so that both backends select
// alike.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/cpu/host_device.h"

namespace piper::engine::cpu {

// A tensor seen as [outer, n, inner] around an axis.
struct AxisLines {
  int64_t outer = 1, n = 0, inner = 1;
};

// Whether a is more extreme than b for ArgMax (kMax) or ArgMin; NaN counts as the extreme, as
// in numpy.
template <bool kMax, typename T>
PIPER_HOST_DEVICE bool more_extreme(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(b)) return false;
    if (std::isnan(a)) return true;
  }
  return kMax ? a > b : a < b;
}

// Whether TopK puts element a (value va) before element b (value vb) of a line: larger (or
// with !largest smaller) values first, NaN as the largest value (as numpy and PyTorch), equal
// values in their original order.
template <typename T>
PIPER_HOST_DEVICE bool top_k_before(T va, T vb, int64_t a, int64_t b, bool largest) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = std::isnan(va), nb = std::isnan(vb);
    if (na || nb) return na != nb ? (largest ? na : nb) : a < b;
  }
  if (va != vb) return largest ? va > vb : va < vb;
  return a < b;
}

}  // namespace piper::engine::cpu
