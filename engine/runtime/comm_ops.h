// Kernels for a plan's Collective, Send and Recv instructions: they run on a
// communicator, over arena tensors in the memory the communicator works on (see
// Communicator::host_buffers). Tensors are flat element
// arrays (shapes do not matter, element counts do); see schemas/plan.proto for
// each collective's contract, including REDUCE_SCATTER's zero padding of the
// input and ALL_GATHER's truncated output.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/runtime/backend.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

// A tensor of a comm instruction and its name for messages ("tensor 4 'dW'").
struct CommTensor {
  TensorView view;
  std::string label;
};

// Checks `collective`'s tensors for a group of `group_size` members (dtypes, element counts,
// the root). Throws piper::Error naming the tensor and the rule it breaks.
void check_collective(const plan::Collective& collective, std::vector<CommTensor> inputs,
                      std::vector<CommTensor> outputs, size_t group_size);

// The memory in which collectives fuse their buckets (a bucket's tensors laid out as one
// buffer, so that it costs one collective, not one per tensor). Collectives that run one after
// another (those of one stream) share one instead of each holding its own for the whole run: it
// is sized to the largest of them and allocated once, after every one of them has reserved.
class FusionBuffer {
 public:
  // The buffer lives in `memory`, which must outlive it.
  explicit FusionBuffer(Backend& memory) : memory_(memory) {}
  ~FusionBuffer();
  FusionBuffer(const FusionBuffer&) = delete;
  FusionBuffer& operator=(const FusionBuffer&) = delete;

  // Makes room for a user that works on `bytes` and reads `zero_bytes` of zeros, which no user
  // writes; before allocate().
  void reserve(size_t bytes, size_t zero_bytes);
  // Allocates the room reserved; once. data() and zeros() are valid from then on.
  void allocate();
  // Where a user works: its `bytes`, holding whatever the user before left there.
  uint8_t* data() const;
  // `zero_bytes` of zeros.
  const uint8_t* zeros() const;
  // Bytes allocated.
  size_t bytes() const { return base_ != nullptr ? zero_room() + bytes_ : 0; }

 private:
  size_t zero_room() const;
  void check_allocated() const;

  Backend& memory_;
  size_t bytes_ = 0, zero_bytes_ = 0;  // the largest reserved
  uint8_t* base_ = nullptr;            // the zeros, then the room users work in
};

// Checks `collective`'s tensors for a group of `communicator.size()` members (dtypes, element
// counts, the root) and returns the kernel that runs it. Throws piper::Error naming the tensor
// and the rule it breaks. `memory` is the backend whose memory holds the tensors and `fusion`:
// it copies them. The kernel reserves room in `fusion` for its fused buckets and runs only
// after fusion.allocate(); it must not run while another user of `fusion` runs. The
// communicator, `memory` and `fusion` must outlive the kernel.
std::unique_ptr<PreparedKernel> prepare_collective(const plan::Collective& collective,
                                                   std::vector<CommTensor> inputs,
                                                   std::vector<CommTensor> outputs,
                                                   Communicator& communicator, Backend& memory,
                                                   FusionBuffer& fusion);

// Sends (or receives into) `tensor` to (from) member `peer` of `communicator`, paired by `tag`.
std::unique_ptr<PreparedKernel> prepare_send(CommTensor tensor, int peer, int tag,
                                             Communicator& communicator);
std::unique_ptr<PreparedKernel> prepare_recv(CommTensor tensor, int peer, int tag,
                                             Communicator& communicator);

}  // namespace piper::engine
