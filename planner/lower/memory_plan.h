// The static memory plan: one arena per rank, offsets chosen so that buffers
// whose lifetimes overlap never share bytes.
#pragma once

#include <cstdint>
#include <vector>

namespace piper::planner {

inline constexpr uint64_t kBufferAlignment = 64;

struct BufferRequest {
  uint64_t bytes = 0;
  // Inclusive instruction positions of first and last use; persistent
  // buffers live for the whole run and never share space.
  int first = 0;
  int last = 0;
  bool persistent = false;
};

struct MemoryPlan {
  std::vector<uint64_t> offsets;  // one per request
  uint64_t arena_bytes = 0;
  uint64_t peak_transient_bytes = 0;  // largest sum of live transient buffers
};

// Persistent buffers first, back to back; transient buffers by decreasing
// size, each at the lowest aligned offset free during its whole lifetime.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

}  // namespace piper::planner
