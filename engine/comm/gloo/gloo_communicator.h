// Communicators over Gloo's TCP transport. Each plan group gets one gloo context
// (a full mesh of TCP connections), connected through the rendezvous store; the
// collectives are rings written on Gloo's point-to-point buffers, so that every
// wait knows the peer it waits for, has a deadline, and can be aborted. Two members
// all-reduce a buffer of up to 1 MiB in one exchange instead of the ring's two (the
// same bits: each adds the other's values to its own).
//
// bfloat16 reductions add in float32 and round to bfloat16 at every step of the ring (as
// NCCL's bfloat16 rings do), and an average divides the rounded sum and rounds again: the
// bits of a sum of more than two members depend on the ring's order, as with NCCL.
//
// Matching across members: the k-th collective of a channel matches the k-th
// collective of the channel of the same name on every other member; a send matches
// the recv of the same tag between the same two members.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace gloo::transport {
class Device;
}

namespace piper::engine {

struct GlooOptions {
  // Deadline of every operation and of connecting a group.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // The address this rank's transport listens on (reachable by the other ranks) ...
  std::string hostname = "127.0.0.1";
  // ... or, when set, the network interface to listen on instead (GLOO_SOCKET_IFNAME).
  std::string iface;
  // Prefix of every store key of this job's groups, e.g. "piper/<plan id>".
  std::string key_prefix = "piper";
  // Optional: what is known about global `ranks` that did not take part, for error messages
  // ("rank 2 is not responding"). May take a few seconds.
  std::function<std::string(const std::vector<int>& ranks)> diagnose;
};

class GlooCommunicatorFactory : public CommunicatorFactory {
 public:
  // `store` must outlive the factory and every communicator it makes; `rank` is this process's
  // global rank.
  GlooCommunicatorFactory(gloo::rendezvous::Store& store, int rank, GlooOptions options);
  ~GlooCommunicatorFactory() override;

  std::unique_ptr<Communicator> connect(const std::string& name,
                                        const std::vector<int>& ranks) override;

 private:
  gloo::rendezvous::Store& store_;
  int rank_;
  GlooOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
};

}  // namespace piper::engine
