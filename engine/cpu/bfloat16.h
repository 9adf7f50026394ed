// bfloat16 on the CPU: storage only. Values are the upper 16 bits of a float32, rounded to
// nearest even; arithmetic widens them to float32, as PyTorch's CPU kernels do.
#pragma once

#include <cstdint>
#include <cstring>

namespace piper::engine::cpu {

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  explicit BFloat16(float value) {
    uint32_t word;
    std::memcpy(&word, &value, sizeof(word));
    if ((word & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((word >> 16) | 0x40u);  // a quiet NaN stays a NaN
    } else {
      bits = static_cast<uint16_t>((word + 0x7fffu + ((word >> 16) & 1u)) >> 16);
    }
  }
  explicit operator float() const {
    const uint32_t word = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &word, sizeof(value));
    return value;
  }
};
static_assert(sizeof(BFloat16) == 2);

inline void widen(const BFloat16* source, float* target, int64_t count) {
  for (int64_t i = 0; i < count; ++i) target[i] = static_cast<float>(source[i]);
}

inline void narrow(const float* source, BFloat16* target, int64_t count) {
  for (int64_t i = 0; i < count; ++i) target[i] = BFloat16(source[i]);
}

}  // namespace piper::engine::cpu
