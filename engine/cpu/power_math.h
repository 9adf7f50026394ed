// Pow and its gradients element by element, shared by the CPU kernels (math.cc) and the CUDA
// ones (engine/cuda/power.cu), so that both compute alike.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/cpu/host_device.h"

namespace piper::engine::cpu {

// Integer power by squaring; negative exponents give 0 unless the base is ±1 (as numpy).
PIPER_HOST_DEVICE inline int64_t int_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 == 0 ? 1 : -1;
    return 0;
  }
  int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) result *= base;
    base *= base;
    exponent >>= 1;
  }
  return result;
}

// x ^ e for a float32 or int64 base and exponent, in the base's type (an int64 base with a
// float exponent truncates the power toward zero).
template <typename T, typename E>
PIPER_HOST_DEVICE T power(T x, E e) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::pow(x, static_cast<float>(e));
  } else if constexpr (std::is_floating_point_v<E>) {
    return static_cast<T>(std::pow(static_cast<double>(x), static_cast<double>(e)));
  } else {
    return int_pow(x, e);
  }
}

// piper.PowBaseGrad: dY · B · A^(B−1), 0 where B = 0 (as PyTorch).
PIPER_HOST_DEVICE inline float pow_base_grad(float dy, float a, float b) {
  if (b == 0.0f) return 0.0f;
  if (b == 2.0f) return dy * 2.0f * a;
  return dy * b * std::pow(a, b - 1.0f);
}

// piper.PowExponentGrad: dY · Y · log(A), 0 where A = 0 and Y is finite (that is, B ≥ 0; as
// PyTorch).
PIPER_HOST_DEVICE inline float pow_exponent_grad(float dy, float a, float y) {
  if (a == 0.0f && std::isfinite(y)) return 0.0f;
  return dy * y * std::log(a);
}

}  // namespace piper::engine::cpu
