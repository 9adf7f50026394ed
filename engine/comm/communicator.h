// The communicator interface: collectives and point-to-point transfers among
// the members of one plan group (engine/comm/gloo implements it over TCP,
// engine/comm/nccl over NCCL). Each stream runs on its own thread, so a
// communicator is used by one thread at a time and streams that communicate
// concurrently use channels. Buffers are host memory, and every operation blocks
// until it is done on this rank, unless host_buffers() is false: then buffers are
// the compute backend's device memory and operations are issued to the calling
// thread's device stream, done in its order. Sizes, counts and roots must agree on
// every member.
// Failures throw piper::Error naming this rank, the operation, the group, and
// what is known about the ranks that did not take part.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace piper::engine {

// The element types of reductions and gathers. bfloat16 is the upper 16 bits of a float32;
// how a communicator sums it (the bits of a rounded sum depend on the order of its additions)
// is in its header.
enum class ElementType { kFloat32, kBFloat16 };

inline size_t element_size(ElementType type) { return type == ElementType::kFloat32 ? 4 : 2; }

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Whether buffers are host memory (the default; Gloo) rather than device memory (NCCL).
  virtual bool host_buffers() const { return true; }

  // This process's index in the group (0-based, in group order).
  virtual int rank() const = 0;
  // Number of members of the group.
  virtual int size() const = 0;

  // data = the element-wise sum over the group of every member's `data` (divided by size()
  // when `average`); every member ends with the same bits.
  virtual void all_reduce(void* data, size_t count, ElementType type, bool average) = 0;
  // out (count_per_rank) = elements [rank() * count_per_rank, +count_per_rank) of the sum over
  // the group of every member's `in` (size() * count_per_rank); `out` may lie within `in`.
  virtual void reduce_scatter(const void* in, void* out, size_t count_per_rank, ElementType type,
                              bool average) = 0;
  // out (size() * count_per_rank) = every member's `in` (count_per_rank) concatenated in group
  // order; `in` may be this member's slice of `out`.
  virtual void all_gather(const void* in, void* out, size_t count_per_rank, ElementType type) = 0;
  // The same on float32.
  void all_reduce(float* data, size_t count, bool average) {
    all_reduce(data, count, ElementType::kFloat32, average);
  }
  void reduce_scatter(const float* in, float* out, size_t count_per_rank, bool average) {
    reduce_scatter(in, out, count_per_rank, ElementType::kFloat32, average);
  }
  void all_gather(const float* in, float* out, size_t count_per_rank) {
    all_gather(in, out, count_per_rank, ElementType::kFloat32);
  }
  // data = member `root`'s data on every member.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Slice j (bytes_per_rank bytes) of `in` goes to member j, which receives it as slice
  // rank() of its `out`; `in` and `out` may be the same buffer.
  virtual void all_to_all(const void* in, void* out, size_t bytes_per_rank) = 0;
  // Piece j (send_bytes[j] bytes at send[j]) goes to member j, which receives it as its piece
  // rank() (recv_bytes[rank()] bytes at recv[rank()]): an all-to-all of pieces of any size, whose
  // sizes every member knows beforehand (an all_to_all of the counts tells them). Each vector
  // has size() entries; a piece of 0 bytes moves nothing; pieces must not overlap.
  virtual void all_to_all_v(const std::vector<const void*>& send,
                            const std::vector<size_t>& send_bytes, const std::vector<void*>& recv,
                            const std::vector<size_t>& recv_bytes) = 0;
  // Sends `bytes` to member `peer`, matched by the recv of the same `tag` there (tags alone pair
  // transfers, on whichever channel); returns once the data left this process's buffer.
  virtual void send(const void* data, size_t bytes, int peer, int tag) = 0;
  // Receives `bytes` from member `peer`, sent there with the same `tag`.
  virtual void recv(void* data, size_t bytes, int peer, int tag) = 0;

  // A communicator over the same group and connections whose collectives match only those of
  // the channel of the same `name` on the other members (in the order each issues them), so
  // that several threads can each run collectives on their own channel at the same time.
  virtual std::unique_ptr<Communicator> channel(const std::string& name) = 0;
  // Makes pending and later operations of this group (every channel) throw promptly; callable
  // from any thread, e.g. when another stream of this rank failed.
  virtual void abort() = 0;
};

class CommunicatorFactory {
 public:
  virtual ~CommunicatorFactory() = default;
  // Joins the group of global `ranks` (in group order; they include this process's rank) under
  // `name`, the same on every member and unique in the job, and returns its communicator.
  // Blocks until every member joined; throws piper::Error naming the missing ranks after the
  // factory's timeout. Members must connect their groups in the same relative order.
  virtual std::unique_ptr<Communicator> connect(const std::string& name,
                                                const std::vector<int>& ranks) = 0;
};

}  // namespace piper::engine
