// Communicators over NCCL, for the CUDA backend: buffers are device memory and every
// operation is issued to the calling thread's CUDA stream (its plan stream's), so that
// communication overlaps computation as far as the plan's events allow.
//
// Each channel of a plan group (one per plan stream that uses the group) is its own
// NCCL communicator, whose unique id member 0 publishes in the rendezvous store under
// the group's and the channel's names: channels pair by name, whatever order the
// members create them in. Creating one does not wait for the other members (NCCL's
// non-blocking initialization); its first operation does.
//
// Matching: NCCL pairs operations in issue order per communicator and has no tags, so
// the k-th collective (send, recv) of a channel matches the k-th of the channel of the
// same name on the other members, and a send's tag is not checked against its recv's.
//
// bfloat16 reductions are NCCL's own (ncclBfloat16): a ring rounds at every step, and an
// average (ncclAvg) multiplies each input by 1/size before summing.
//
// Timeouts: an operation returns once issued, and a watchdog thread per channel watches it
// complete on the device. When the operation is still not done `timeout` after it was issued,
// or NCCL reports an error, the watchdog aborts the channel's communicator (which ends the
// stuck device work) and reports why to the CUDA context, so that the stream's finish throws
// it ("rank 0 waited 300 s in all_reduce on channel 'dp' of NCCL group 3 (ranks 0,1) for
// rank 1 ..."); later operations of the channel throw it too. abort() reaches every channel of
// the group.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace piper::engine {

namespace cuda {
class CudaContext;
}

struct NcclOptions {
  // Deadline of a channel's initialization (every member must create it by then) and of each
  // operation, counted from when it was issued.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Prefix of every store key of this job's groups, e.g. "piper/<plan id>".
  std::string key_prefix = "piper";
};

class NcclCommunicatorFactory : public CommunicatorFactory {
 public:
  // `store` and `context` (the CUDA backend's) must outlive the factory and every communicator
  // it makes; `rank` is this process's global rank.
  NcclCommunicatorFactory(gloo::rendezvous::Store& store, int rank, cuda::CudaContext& context,
                          NcclOptions options);

  std::unique_ptr<Communicator> connect(const std::string& name,
                                        const std::vector<int>& ranks) override;

 private:
  gloo::rendezvous::Store& store_;
  int rank_;
  cuda::CudaContext& context_;
  NcclOptions options_;
};

}  // namespace piper::engine
