// ONNX Mod's formula, shared by the CPU kernel (elementwise.cc) and the CUDA one
// (engine/cuda/elementwise.cu) so that both backends compute the same remainders.
#pragma once

#include <math.h>

#include <type_traits>

#include "engine/cpu/host_device.h"

namespace piper::engine::cpu {

// a mod b for float or int64. With `fmod` the remainder of truncated division, which takes the
// dividend's sign (C's fmod and %, torch.fmod); without it that of floored division, which
// takes the divisor's sign (Python's %, numpy.mod, torch.remainder). ONNX asks fmod = 1 for
// floats; Piper also gives floats the floored remainder. An integer divisor of 0 gives 0, as
// numpy does (C leaves it undefined), and so does -1 (INT64_MIN % -1 overflows in C); a float
// divisor of 0 gives NaN.
template <typename T>
PIPER_HOST_DEVICE T mod(T a, T b, bool fmod) {
  T r;
  if constexpr (std::is_floating_point_v<T>) {
    r = fmodf(a, b);
  } else {
    if (b == 0 || b == -1) return 0;
    r = a % b;
  }
  if (!fmod && r != T(0) && (r < T(0)) != (b < T(0))) r += b;
  return r;
}

}  // namespace piper::engine::cpu
