#include "planner/lower/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace piper::planner {
namespace {

uint64_t align(uint64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

bool overlaps_in_time(const BufferRequest& a, const BufferRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

uint64_t peak_live_bytes(const std::vector<BufferRequest>& requests) {
  std::vector<std::pair<int, int64_t>> events;
  for (const auto& request : requests) {
    if (request.persistent) continue;
    events.emplace_back(request.first, static_cast<int64_t>(request.bytes));
    events.emplace_back(request.last + 1, -static_cast<int64_t>(request.bytes));
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto& [position, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return static_cast<uint64_t>(peak);
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  uint64_t persistent_end = 0;
  std::vector<size_t> transient;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].persistent) {
      plan.offsets[i] = persistent_end;
      persistent_end += align(requests[i].bytes);
    } else {
      transient.push_back(i);
    }
  }
  std::stable_sort(transient.begin(), transient.end(),
                   [&](size_t a, size_t b) { return requests[a].bytes > requests[b].bytes; });
  // Placed buffers by offset: the first fit is the first gap, in offset order, between those
  // alive at the same time, found without collecting and sorting them for every buffer.
  std::vector<size_t> by_offset;
  uint64_t end = persistent_end;
  for (size_t index : transient) {
    const BufferRequest& request = requests[index];
    const uint64_t size = align(request.bytes);
    uint64_t offset = persistent_end;
    for (size_t other : by_offset) {
      if (!overlaps_in_time(request, requests[other])) continue;
      if (offset + size <= plan.offsets[other]) break;
      offset = std::max(offset, plan.offsets[other] + align(requests[other].bytes));
    }
    plan.offsets[index] = offset;
    end = std::max(end, offset + size);
    const auto after =
        std::upper_bound(by_offset.begin(), by_offset.end(), offset,
                         [&](uint64_t value, size_t other) { return value < plan.offsets[other]; });
    by_offset.insert(after, index);
  }
  plan.arena_bytes = end;
  plan.peak_transient_bytes = peak_live_bytes(requests);
  return plan;
}

}  // namespace piper::planner
