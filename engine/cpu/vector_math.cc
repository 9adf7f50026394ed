#include "engine/cpu/vector_math.h"

#include <cmath>

namespace piper::engine::cpu {

PIPER_VECTOR_CLONES void exp_n(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = vexp(x[i]);
}

// Elements erf_n checks for |x| >= 2 (or NaN) at a time.
constexpr int64_t kErfBlock = 64;

PIPER_VECTOR_CLONES void erf_n(const float* x, float* y, int64_t n) {
  for (int64_t begin = 0; begin < n; begin += kErfBlock) {
    const int64_t end = begin + kErfBlock < n ? begin + kErfBlock : n;
    int far = 0;
    for (int64_t i = begin; i < end; ++i) far |= !(x[i] < 2.0f && x[i] > -2.0f);
    if (far != 0) {
      for (int64_t i = begin; i < end; ++i) y[i] = verf(x[i]);
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const float near = verf_near_magnitude(x[i] < 0.0f ? -x[i] : x[i]);
        y[i] = x[i] < 0.0f ? -near : near;
      }
    }
  }
}

// e^-|x| never overflows; 1 / (1 + e^-x) = e^x / (1 + e^x) for x < 0.
PIPER_VECTOR_CLONES void sigmoid_n(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float e = vexp(-std::fabs(x[i]));
    y[i] = x[i] < 0.0f ? e / (1.0f + e) : 1.0f / (1.0f + e);
  }
}

}  // namespace piper::engine::cpu
