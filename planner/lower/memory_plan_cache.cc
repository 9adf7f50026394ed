#include "planner/lower/memory_plan_cache.h"

#include <algorithm>

namespace piper::planner {
namespace {

uint64_t mix(uint64_t hash, uint64_t value) {
  // FNV-1a over the value's bytes.
  for (int i = 0; i < 8; ++i) {
    hash ^= (value >> (8 * i)) & 0xff;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

uint64_t hash_of(const std::vector<BufferRequest>& requests) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const BufferRequest& request : requests) {
    hash = mix(hash, request.bytes);
    hash = mix(hash, (static_cast<uint64_t>(static_cast<uint32_t>(request.first)) << 32) |
                         static_cast<uint32_t>(request.last));
    hash = mix(hash, request.persistent);
  }
  return hash;
}

bool same(const std::vector<BufferRequest>& a, const std::vector<BufferRequest>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const BufferRequest& x, const BufferRequest& y) {
                      return x.bytes == y.bytes && x.first == y.first && x.last == y.last &&
                             x.persistent == y.persistent;
                    });
}

}  // namespace

std::shared_ptr<const MemoryPlanCache::Entry> MemoryPlanCache::find(
    uint64_t hash, const std::vector<BufferRequest>& requests) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto bucket = entries_.find(hash);
  if (bucket == entries_.end()) return nullptr;
  for (const auto& entry : bucket->second) {
    if (same(entry->requests, requests)) return entry;
  }
  return nullptr;
}

MemoryPlan MemoryPlanCache::plan(const std::vector<BufferRequest>& requests) {
  const uint64_t hash = hash_of(requests);
  if (const auto entry = find(hash, requests)) {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++hits_;
    return entry->plan;
  }
  // Planned outside the lock: other threads' ranks need not wait for this one.
  auto entry = std::make_shared<Entry>(Entry{requests, plan_memory(requests)});
  const std::lock_guard<std::mutex> lock(mutex_);
  ++misses_;
  if (size_ < capacity_) {
    entries_[hash].push_back(entry);
    ++size_;
  }
  return entry->plan;
}

size_t MemoryPlanCache::hits() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

size_t MemoryPlanCache::misses() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

}  // namespace piper::planner
