#include "engine/cpu/vector_math.h"

namespace piper::engine::cpu {

// One copy per vector width, chosen when the program loads (GCC function multiversioning).
// This file builds with -ffp-contract=off, so that the copies round alike.
#if defined(__x86_64__) && defined(__GNUC__)
#define PIPER_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PIPER_VECTOR_CLONES
#endif

PIPER_VECTOR_CLONES void exp_n(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = vexp(x[i]);
}

PIPER_VECTOR_CLONES void erf_n(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = verf(x[i]);
}

}  // namespace piper::engine::cpu
