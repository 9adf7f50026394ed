#include "planner/lower/memory_plan_cache.h"

#include <gtest/gtest.h>

#include <thread>

namespace piper::planner {
namespace {

std::vector<BufferRequest> requests(int shift) {
  return {
      {.bytes = 1000, .first = 0, .last = 4 + shift},
      {.bytes = 300, .first = 2, .last = 3},
      {.bytes = 200, .first = 5, .last = 8},
      {.bytes = 64, .first = 0, .last = 0, .persistent = true},
  };
}

void expect_same(const MemoryPlan& got, const MemoryPlan& want) {
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.arena_bytes, want.arena_bytes);
  EXPECT_EQ(got.peak_transient_bytes, want.peak_transient_bytes);
}

TEST(MemoryPlanCache, EqualRequestsArePlannedOnce) {
  MemoryPlanCache cache;
  expect_same(cache.plan(requests(0)), plan_memory(requests(0)));
  expect_same(cache.plan(requests(0)), plan_memory(requests(0)));
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.hits(), 1u);
}

TEST(MemoryPlanCache, ALifetimeThatDiffersIsPlannedAnew) {
  MemoryPlanCache cache;
  cache.plan(requests(0));
  // The first buffer now outlives the third: they may no longer share bytes.
  const MemoryPlan moved = cache.plan(requests(2));
  expect_same(moved, plan_memory(requests(2)));
  EXPECT_NE(moved.offsets, plan_memory(requests(0)).offsets);
  EXPECT_EQ(cache.misses(), 2u);
  EXPECT_EQ(cache.hits(), 0u);
}

TEST(MemoryPlanCache, PastItsCapacityItPlansWithoutKeeping) {
  MemoryPlanCache cache(1);
  cache.plan(requests(0));
  cache.plan(requests(2));
  expect_same(cache.plan(requests(2)), plan_memory(requests(2)));
  EXPECT_EQ(cache.misses(), 3u);
  cache.plan(requests(0));
  EXPECT_EQ(cache.hits(), 1u);
}

TEST(MemoryPlanCache, ThreadsGetWhatPlanMemoryGives) {
  MemoryPlanCache cache;
  std::vector<std::thread> threads;
  std::vector<MemoryPlan> got(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] { got[t] = cache.plan(requests(2 * (t % 2))); });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) expect_same(got[t], plan_memory(requests(2 * (t % 2))));
  EXPECT_EQ(cache.hits() + cache.misses(), 8u);
}

}  // namespace
}  // namespace piper::planner
