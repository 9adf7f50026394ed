// Dropout's counter-based random stream, shared by the CPU kernel (dropout.cc) and the CUDA
// one (engine/cuda/dropout.cu), so that both draw the same masks bit for bit: an element keeps
// its value when hash(run seed, step, node, g) >= ratio, where node identifies the ONNX node and
// g is the element's index in the whole tensor of the step (plan.proto's DropoutKey). Neither
// depends on the layout, so one process, replicas, microbatches, pipeline stages and
// tensor-parallel blocks all draw the same mask for the same element.
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

// A node's stream, from its id (DropoutKey.node) and its `seed` attribute.
inline uint64_t node_key(uint64_t node, int64_t seed) {
  return mix(node * kGolden + static_cast<uint64_t>(seed));
}

// The key of one step of the node.
inline uint64_t step_key(uint64_t run_seed, int64_t step, uint64_t node) {
  return mix(mix(run_seed + kGolden) ^ mix(static_cast<uint64_t>(step)) ^ node);
}

// Where a kernel instance's elements lie in the whole tensor: a box of `local` at `offset` in
// `whole` (C order). Its trailing dimensions that the box holds whole are folded into `inner`,
// so that the common case, rows of the batch, costs one division per element.
constexpr int kMaxBoxRank = 8;
struct Box {
  int rank = 0;  // of the outer dimensions left after folding
  int64_t inner = 1;
  int64_t local[kMaxBoxRank] = {};
  int64_t offset[kMaxBoxRank] = {};
  int64_t whole[kMaxBoxRank] = {};
};

// The index in the whole tensor of local element i.
PIPER_HOST_DEVICE inline int64_t global_index(const Box& box, int64_t i) {
  int64_t rest = i / box.inner;
  int64_t index = 0;
  int64_t stride = 1;
  for (int d = box.rank - 1; d >= 0; --d) {
    index += (box.offset[d] + rest % box.local[d]) * stride;
    stride *= box.whole[d];
    rest /= box.local[d];
  }
  return index * box.inner + i % box.inner;
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
