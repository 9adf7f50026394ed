// The communicator of a group of one: every collective is a copy, and there is
// no peer to send to.
#pragma once

#include <functional>

#include "engine/comm/communicator.h"

namespace piper::engine {

class SelfCommunicator : public Communicator {
 public:
  // Copies `bytes` between buffers that may overlap.
  using Copy = std::function<void(void* dst, const void* src, size_t bytes)>;

  // Buffers are host memory, copied with memmove; or, given the compute backend's `copy`, that
  // backend's memory.
  SelfCommunicator();
  explicit SelfCommunicator(Copy copy) : copy_(std::move(copy)), host_buffers_(false) {}

  bool host_buffers() const override { return host_buffers_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::reduce_scatter;
  void all_reduce(void* data, size_t count, ElementType type, bool average) override;
  void reduce_scatter(const void* in, void* out, size_t count_per_rank, ElementType type,
                      bool average) override;
  void all_gather(const void* in, void* out, size_t count_per_rank, ElementType type) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void all_to_all(const void* in, void* out, size_t bytes_per_rank) override;
  void all_to_all_v(const std::vector<const void*>& send, const std::vector<size_t>& send_bytes,
                    const std::vector<void*>& recv, const std::vector<size_t>& recv_bytes) override;
  // Throw piper::Error: a group of one has no peer.
  void send(const void* data, size_t bytes, int peer, int tag) override;
  void recv(void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Communicator> channel(const std::string& name) override;
  void abort() override {}

 private:
  Copy copy_;
  bool host_buffers_ = true;
};

}  // namespace piper::engine
