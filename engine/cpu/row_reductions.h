// Sum, dot product and maximum of one contiguous row, with eight independent
// accumulators so the loops vectorise; shared by the softmax-like kernels
// (attention, LayerNorm, Softmax).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace piper::engine::cpu {

inline float row_sum(const float* x, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += x[i + k];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += x[i];
  for (float a : acc) sum += a;
  return sum;
}

inline float row_dot(const float* x, const float* y, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += x[i + k] * y[i + k];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += x[i] * y[i];
  for (float a : acc) sum += a;
  return sum;
}

// −∞ when n = 0. The maximum does not depend on the order of comparisons, so
// this equals a sequential scan exactly.
inline float row_maximum(const float* x, int64_t n) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  float acc[8] = {kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] = std::max(acc[k], x[i + k]);
  }
  float m = kLowest;
  for (; i < n; ++i) m = std::max(m, x[i]);
  for (float a : acc) m = std::max(m, a);
  return m;
}

}  // namespace piper::engine::cpu
