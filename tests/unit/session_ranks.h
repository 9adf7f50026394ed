// Helpers for sessions of multi-rank plans in one process: ranks as threads meeting through
// gloo's in-memory store and talking over localhost, and the plan fields that make a rank.
#pragma once

#include <gloo/rendezvous/hash_store.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/gloo/gloo_communicator.h"
#include "schemas/plan.pb.h"

namespace piper::engine::testing {

inline void AddGroup(plan::Plan& plan, int id, const std::vector<int>& ranks) {
  plan::CommGroup* group = plan.add_groups();
  group->set_id(id);
  for (int rank : ranks) group->add_ranks(rank);
}

inline void SetRank(plan::Plan& plan, int rank, int world) {
  plan.mutable_header()->set_rank(static_cast<uint32_t>(rank));
  plan.mutable_header()->set_world_size(static_cast<uint32_t>(world));
}

// Runs body(rank) on one thread per rank, each with a communicator factory over one store;
// returns each rank's error message ("" when it succeeded).
inline std::vector<std::string> RunRanks(
    int world, const std::function<void(int, CommunicatorFactory&)>& body,
    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  gloo::rendezvous::HashStore store;
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        GlooOptions options;
        options.timeout = timeout;
        GlooCommunicatorFactory factory(store, rank, options);
        body(rank, factory);
      } catch (const std::exception& error) {
        errors[static_cast<size_t>(rank)] = error.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

}  // namespace piper::engine::testing
