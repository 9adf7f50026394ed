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

// Checks `collective`'s tensors for a group of `communicator.size()` members (dtypes, element
// counts, the root) and returns the kernel that runs it. Throws piper::Error naming the tensor
// and the rule it breaks. `memory` is the backend whose memory holds the tensors: it copies
// them and holds fused buckets. The communicator and `memory` must outlive the kernel.
std::unique_ptr<PreparedKernel> prepare_collective(const plan::Collective& collective,
                                                   std::vector<CommTensor> inputs,
                                                   std::vector<CommTensor> outputs,
                                                   Communicator& communicator, Backend& memory);

// Sends (or receives into) `tensor` to (from) member `peer` of `communicator`, paired by `tag`.
std::unique_ptr<PreparedKernel> prepare_send(CommTensor tensor, int peer, int tag,
                                             Communicator& communicator);
std::unique_ptr<PreparedKernel> prepare_recv(CommTensor tensor, int peer, int tag,
                                             Communicator& communicator);

}  // namespace piper::engine
