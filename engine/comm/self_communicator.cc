#include "engine/comm/self_communicator.h"

#include <cstring>

#include "formats/error.h"

namespace piper::engine {

SelfCommunicator::SelfCommunicator()
    : copy_([](void* dst, const void* src, size_t bytes) {
        if (bytes != 0) std::memmove(dst, src, bytes);
      }) {}

void SelfCommunicator::all_reduce(void*, size_t, ElementType, bool) {}

void SelfCommunicator::reduce_scatter(const void* in, void* out, size_t count_per_rank,
                                      ElementType type, bool) {
  if (out != in) copy_(out, in, count_per_rank * element_size(type));
}

void SelfCommunicator::all_gather(const void* in, void* out, size_t count_per_rank,
                                  ElementType type) {
  if (out != in) copy_(out, in, count_per_rank * element_size(type));
}

void SelfCommunicator::broadcast(void*, size_t, int root) {
  if (root != 0) {
    throw Error("broadcast from member " + std::to_string(root) + " of a group of one");
  }
}

void SelfCommunicator::all_to_all(const void* in, void* out, size_t bytes_per_rank) {
  if (out != in) copy_(out, in, bytes_per_rank);
}

void SelfCommunicator::all_to_all_v(const std::vector<const void*>& send,
                                    const std::vector<size_t>& send_bytes,
                                    const std::vector<void*>& recv,
                                    const std::vector<size_t>& recv_bytes) {
  if (send_bytes.at(0) != recv_bytes.at(0)) {
    throw Error("all_to_all_v in a group of one sends " + std::to_string(send_bytes[0]) +
                " bytes to itself but receives " + std::to_string(recv_bytes[0]));
  }
  if (send_bytes[0] > 0 && recv.at(0) != send.at(0)) copy_(recv[0], send[0], send_bytes[0]);
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
