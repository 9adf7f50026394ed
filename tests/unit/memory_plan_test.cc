#include "planner/lower/memory_plan.h"

#include <gtest/gtest.h>

namespace piper::planner {
namespace {

bool disjoint(const MemoryPlan& plan, const std::vector<BufferRequest>& requests, size_t a,
              size_t b) {
  return plan.offsets[a] + requests[a].bytes <= plan.offsets[b] ||
         plan.offsets[b] + requests[b].bytes <= plan.offsets[a];
}

TEST(MemoryPlan, BuffersWithDisjointLifetimesShareSpace) {
  const std::vector<BufferRequest> requests = {
      {.bytes = 1024, .first = 0, .last = 1},
      {.bytes = 1024, .first = 2, .last = 3},
  };
  const MemoryPlan plan = plan_memory(requests);
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
  EXPECT_EQ(plan.arena_bytes, 1024u);
  EXPECT_EQ(plan.peak_transient_bytes, 1024u);
}

TEST(MemoryPlan, OverlappingLifetimesNeverShareBytes) {
  const std::vector<BufferRequest> requests = {
      {.bytes = 100, .first = 0, .last = 5},
      {.bytes = 300, .first = 2, .last = 3},
      {.bytes = 200, .first = 3, .last = 8},
      {.bytes = 50, .first = 6, .last = 9},
      {.bytes = 64, .first = 0, .last = 0, .persistent = true},
  };
  const MemoryPlan plan = plan_memory(requests);
  for (size_t a = 0; a < requests.size(); ++a) {
    EXPECT_EQ(plan.offsets[a] % kBufferAlignment, 0u);
    for (size_t b = a + 1; b < requests.size(); ++b) {
      const bool live_together =
          requests[a].persistent || requests[b].persistent ||
          (requests[a].first <= requests[b].last && requests[b].first <= requests[a].last);
      if (live_together) {
        EXPECT_TRUE(disjoint(plan, requests, a, b)) << a << " and " << b;
      }
    }
  }
  EXPECT_EQ(plan.peak_transient_bytes, 600u);  // buffers 0, 1 and 2 at position 3
  EXPECT_EQ(plan.offsets[4], 0u);              // persistent buffers come first
}

}  // namespace
}  // namespace piper::planner
