// Memory plans shared between ranks. Ranks that differ only in their data-parallel index (or in
// another mesh coordinate) lower to the same buffers with the same sizes and lifetimes; planning
// their arena once per distinct list of requests, not once per rank, saves most of a large
// job's lowering (issue 18). A hit compares the whole list, so what the cache returns is what
// plan_memory returns for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "planner/lower/memory_plan.h"

namespace piper::planner {

class MemoryPlanCache {
 public:
  // Holds at most `capacity` plans: past that, lists not yet seen are planned and not kept, so
  // that a job whose ranks all differ costs what it did without the cache.
  explicit MemoryPlanCache(size_t capacity = 64) : capacity_(capacity) {}

  // plan_memory(requests). Safe to call from several threads.
  MemoryPlan plan(const std::vector<BufferRequest>& requests);

  // Calls answered from the cache, and calls that planned.
  size_t hits() const;
  size_t misses() const;

 private:
  struct Entry {
    std::vector<BufferRequest> requests;
    MemoryPlan plan;
  };
  std::shared_ptr<const Entry> find(uint64_t hash, const std::vector<BufferRequest>& requests);

  const size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<const Entry>>> entries_;
  size_t size_ = 0;
  size_t hits_ = 0;
  size_t misses_ = 0;
};

}  // namespace piper::planner
