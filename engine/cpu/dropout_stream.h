// Dropout's counter-based random stream, shared by the CPU kernel (dropout.cc) and the CUDA
// one (engine/cuda/dropout.cu), so that both draw the same masks bit for bit: element i of a
// Dropout instruction keeps its value when hash(run seed, step, instruction, i) >= ratio.
#pragma once

#include <cstdint>

#include "engine/cpu/host_device.h"

namespace piper::engine::dropout {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// SplitMix64's finalizer: a bijective 64-bit mix.
PIPER_HOST_DEVICE inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// An instruction's stream, from its output's index in the plan and the node's `seed` attribute.
inline uint64_t instruction_key(int64_t output, int64_t seed) {
  return mix(static_cast<uint64_t>(output) * kGolden + static_cast<uint64_t>(seed));
}

// The key of one run of the instruction.
inline uint64_t step_key(uint64_t run_seed, int64_t step, uint64_t instruction) {
  return mix(mix(run_seed + kGolden) ^ mix(static_cast<uint64_t>(step)) ^ instruction);
}

// Elements whose draw reaches this keep their value: the top 24 bits of the draw, as a fraction
// in [0, 1), against `ratio` (in [0, 1]).
PIPER_HOST_DEVICE inline uint64_t threshold(float ratio) {
  return static_cast<uint64_t>(static_cast<double>(ratio) * 16777216.0);
}

PIPER_HOST_DEVICE inline bool keeps(uint64_t key, int64_t i, uint64_t threshold) {
  return (mix(key + static_cast<uint64_t>(i) * kGolden) >> 40) >= threshold;
}

// Ratio and training mode, read at run time from the optional scalar inputs (on the device by
// the CUDA kernels).
struct Mode {
  const float* ratio = nullptr;            // null: 0.5
  const uint8_t* training_mode = nullptr;  // null: false
  PIPER_HOST_DEVICE bool training() const {
    return training_mode != nullptr && *training_mode != 0;
  }
  PIPER_HOST_DEVICE float probability() const { return ratio != nullptr ? *ratio : 0.5f; }
  // The factor kept elements are scaled by: 1 / (1 - ratio) in training, 1 outside it.
  PIPER_HOST_DEVICE float scale() const {
    if (!training()) return 1.0f;
    const float p = probability();
    return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  }
};

}  // namespace piper::engine::dropout
