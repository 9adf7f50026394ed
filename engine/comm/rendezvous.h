// How the ranks of one job meet before training: through a store (tcp:// hosted
// by rank 0, or file:// in a shared directory), where each rank registers its plan
// id, waits for the others (naming those that do not come), refuses plans of
// another planning run, and then keeps a heartbeat so that the others can tell a
// rank that died or stopped from one that is merely slow.
//
// Keys: piper/rank/<r> (plan id, world size, plan path, host, pid; created once), piper/alive/<r>
// (heartbeat counter), piper/failed/<r> (the error a rank stopped with), and the
// communicators' piper/<plan id>/<group>/...
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/store.h"
#include "formats/error.h"

namespace piper::engine {

class TcpStoreServer;

struct RendezvousOptions {
  std::string url;       // tcp://HOST:PORT or file:///shared/dir
  std::string url_from;  // where the URL came from, for messages ("--rendezvous")
  int rank = 0;
  int world_size = 1;
  std::string plan_id;
  std::string plan_path;  // for messages
  // The job's secret (PIPER_RENDEZVOUS_TOKEN) for the tcp:// store's handshake; empty: none.
  std::string token;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // How often this rank's heartbeat ticks, and how long diagnose() watches the others'.
  // A window of five beats: a rank that misses them all is stopped, not slow, and the blame
  // comes within --timeout + 2 s.
  std::chrono::milliseconds heartbeat_period{std::chrono::milliseconds(200)};
  std::chrono::milliseconds diagnose_window{std::chrono::seconds(1)};
  // How long rank 0 keeps serving a tcp:// store after it is done while others are still
  // connected: after a success, for them to finish; after a failure (report_failure), only
  // long enough for them to read it (diagnose_window + 1 s, at most this). Connections of
  // ranks diagnose() found not responding are not waited for.
  std::chrono::milliseconds linger{std::chrono::seconds(5)};
};

// How diagnose() words a rank that stopped beating, and the ranks a message says so of
// (piper-launch reads them from a rank's error to name the rank at fault).
std::string not_responding_text(int rank, std::chrono::milliseconds window);
std::vector<int> ranks_reported_not_responding(const std::string& message);

class Rendezvous {
 public:
  // Hosts the tcp:// store on rank 0, connects to the store, registers this rank and waits
  // until every rank registered. Throws piper::Error naming the ranks still missing after the
  // timeout, a rank registered twice, or the ranks whose plan id differs from rank 0's.
  explicit Rendezvous(RendezvousOptions options);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  Store& store() { return *store_; }
  // Gloo communicators for the plan's groups, meeting through this store; failures name what
  // diagnose() knows. Valid while this rendezvous lives.
  CommunicatorFactory& communicators() { return *communicators_; }

  // What is known about global `ranks` that stopped answering, e.g. "rank 2 failed: <its
  // error>; rank 3 is not responding (no heartbeat for 1 s: killed, stopped or hung)", or ""
  // when every one of them looks alive. Watches heartbeats for diagnose_window.
  std::string diagnose(const std::vector<int>& ranks);
  // Tells the other ranks that this rank stopped with `message` (best effort, never throws).
  void report_failure(const std::string& message);

 private:
  std::unique_ptr<Store> open_store(std::chrono::milliseconds timeout) const;
  // Rank 0 could not listen (`cannot_listen`): throws naming the other process when the
  // store there already holds this plan's rank 0; returns otherwise.
  void refuse_duplicate_rank0(const Error& cannot_listen) const;
  void register_rank();
  void wait_for_ranks();
  void check_plan_ids();
  void heartbeat_loop();
  // Rank 0, done: keeps serving while the others may still read the store.
  void linger();

  RendezvousOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<Store> store_;
  std::string gloo_hostname_;
  std::unique_ptr<CommunicatorFactory> communicators_;

  bool failed_ = false;
  std::mutex diagnosed_mutex_;
  std::vector<int> not_responding_;  // found by diagnose(): linger() does not wait for them
  std::mutex heartbeat_mutex_;
  std::condition_variable heartbeat_stop_;
  bool stopping_ = false;
  std::thread heartbeat_;
};

}  // namespace piper::engine
