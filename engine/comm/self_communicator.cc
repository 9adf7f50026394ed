#include "engine/comm/self_communicator.h"

#include <cstring>

#include "formats/error.h"

namespace piper::engine {

SelfCommunicator::SelfCommunicator()
    : copy_([](void* dst, const void* src, size_t bytes) {
        if (bytes != 0) std::memmove(dst, src, bytes);
      }) {}

void SelfCommunicator::all_reduce(float*, size_t, bool) {}

void SelfCommunicator::reduce_scatter(const float* in, float* out, size_t count_per_rank, bool) {
  if (out != in) copy_(out, in, count_per_rank * sizeof(float));
}

void SelfCommunicator::all_gather(const float* in, float* out, size_t count_per_rank) {
  if (out != in) copy_(out, in, count_per_rank * sizeof(float));
}

void SelfCommunicator::broadcast(void*, size_t, int root) {
  if (root != 0) {
    throw Error("broadcast from member " + std::to_string(root) + " of a group of one");
  }
}

void SelfCommunicator::all_to_all(const void* in, void* out, size_t bytes_per_rank) {
  if (out != in) copy_(out, in, bytes_per_rank);
}

void SelfCommunicator::send(const void*, size_t, int peer, int tag) {
  throw Error("send of tag " + std::to_string(tag) + " to member " + std::to_string(peer) +
              " of a group of one");
}

void SelfCommunicator::recv(void*, size_t, int peer, int tag) {
  throw Error("recv of tag " + std::to_string(tag) + " from member " + std::to_string(peer) +
              " of a group of one");
}

std::unique_ptr<Communicator> SelfCommunicator::channel(const std::string&) {
  return std::make_unique<SelfCommunicator>(*this);
}

}  // namespace piper::engine
