#include "engine/comm/gloo/gloo_communicator.h"

#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "engine/comm/store.h"
#include "engine/cpu/bfloat16.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

using Clock = std::chrono::steady_clock;
using gloo::transport::UnboundBuffer;

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

// Gloo's message without its "[source.cc:123] " prefix.
std::string gloo_message(const std::string& what) {
  if (what.size() > 2 && what[0] == '[') {
    const size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

// target = a + b, element by element (target may be a or b). bfloat16 adds in float32 and
// rounds the sum, so every step of a ring rounds, as NCCL's bfloat16 rings do.
void add(void* target, const void* a, const void* b, size_t count, ElementType type) {
  if (type == ElementType::kFloat32) {
    const auto *x = static_cast<const float*>(a), *y = static_cast<const float*>(b);
    auto* sum = static_cast<float*>(target);
    for (size_t i = 0; i < count; ++i) sum[i] = x[i] + y[i];
    return;
  }
  const auto *x = static_cast<const cpu::BFloat16*>(a), *y = static_cast<const cpu::BFloat16*>(b);
  auto* sum = static_cast<cpu::BFloat16*>(target);
  for (size_t i = 0; i < count; ++i) {
    sum[i] = cpu::BFloat16(static_cast<float>(x[i]) + static_cast<float>(y[i]));
  }
}

// data /= n; bfloat16 divides in float32 and rounds.
void divide(void* data, size_t count, size_t n, ElementType type) {
  const auto members = static_cast<float>(n);
  if (type == ElementType::kFloat32) {
    auto* values = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) values[i] /= members;
    return;
  }
  auto* values = static_cast<cpu::BFloat16*>(data);
  for (size_t i = 0; i < count; ++i)
    values[i] = cpu::BFloat16(static_cast<float>(values[i]) / members);
}

std::string elapsed_text(Clock::time_point since) {
  return seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since));
}

// Slots pair a send with its recv on one connection:
// [8 bits kind][24 bits channel][16 bits operation number][16 bits step] for collectives,
// [8 bits kind][24 bits zero][32 bits tag] for point-to-point transfers.
constexpr uint64_t kCollectiveSlot = 1, kPointToPointSlot = 2;

// Two members all-reduce buffers up to this size in one exchange of the whole buffer; larger
// ones in the ring, which adds half as many elements on each member (measured here by
// piper-run --profile-costs: 0.7 ms at 1 MiB against the ring's 2-4 ms, 6.6-8.7 ms at 4 MiB
// against 5.1-6.4 ms).
constexpr size_t kPairExchangeBytes = size_t{1} << 20;

uint64_t collective_slot(uint32_t channel, uint32_t operation, uint32_t step) {
  return kCollectiveSlot << 56 | uint64_t{channel & 0xffffff} << 32 |
         uint64_t{operation & 0xffff} << 16 | uint64_t{step & 0xffff};
}

uint64_t transfer_slot(int tag) { return kPointToPointSlot << 56 | static_cast<uint32_t>(tag); }

// FNV-1a, folded to 24 bits: the channel field of a slot.
uint32_t channel_id(const std::string& name) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : name) hash = (hash ^ c) * 16777619u;
  return (hash >> 24 ^ hash) & 0xffffff;
}

// Gloo's transport device, whose event thread runs as a batch thread. Its handler only
// try-locks a connection and, while a caller holds that lock (posting a send or recv), returns
// to a level-triggered epoll that reports the same event again at once: the thread spins until
// the caller runs again. A normal thread woken on the caller's core preempts the caller there
// and spins out its time slice, a scheduler tick: on 2 cores with 2 ranks, up to 17 of 20
// collectives of one size took 4 ms instead of 0.1-0.4 (piper-run --profile-costs). A SCHED_BATCH
// thread keeps its share of the CPU, but its wakeups do not preempt the running thread. The event
// thread takes the policy of the thread that creates the device, hence the creator thread.
std::shared_ptr<gloo::transport::Device> create_device(const gloo::transport::tcp::attr& attr) {
  std::shared_ptr<gloo::transport::Device> device;
  std::exception_ptr error;
  std::thread creator([&] {
    try {
      const sched_param param{};
      ::sched_setscheduler(0, SCHED_BATCH, &param);  // if refused, Gloo runs as before
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (...) {
      error = std::current_exception();
    }
  });
  creator.join();
  if (error) std::rethrow_exception(error);
  return device;
}

// What the channels of one group share: the gloo context, names for messages, and the
// transfers in flight, which abort() interrupts.
class GlooGroup {
 public:
  GlooGroup(std::string name, std::vector<int> ranks, int rank, std::chrono::milliseconds timeout,
            std::function<std::string(const std::vector<int>&)> diagnose)
      : name(std::move(name)),
        ranks(std::move(ranks)),
        rank(rank),
        timeout(timeout),
        diagnose_(std::move(diagnose)) {}

  const std::string name;
  const std::vector<int> ranks;  // global ranks in group order
  const int rank;                // this member's index
  const std::chrono::milliseconds timeout;
  std::shared_ptr<gloo::Context> context;

  int global_rank() const { return ranks[static_cast<size_t>(rank)]; }
  std::string describe() const { return name + " (ranks " + rank_list(ranks) + ")"; }

  // "; rank 2 is not responding ..." for the members other than this one, or "".
  std::string diagnose() const {
    if (!diagnose_) return "";
    std::vector<int> others;
    for (int member : ranks) {
      if (member != global_rank()) others.push_back(member);
    }
    try {
      const std::string text = diagnose_(others);
      return text.empty() ? "" : "; " + text;
    } catch (const std::exception&) {
      return "";
    }
  }

  // Registers a transfer about to be waited for; throws when the group was aborted.
  void track(UnboundBuffer* buffer, bool is_send, const std::string& what) {
    std::lock_guard lock(mutex_);
    if (aborted_) throw aborted_error(what);
    pending_[buffer] = is_send;
  }
  void untrack(UnboundBuffer* buffer) {
    std::lock_guard lock(mutex_);
    pending_.erase(buffer);
  }
  void abort() {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    for (const auto& [buffer, is_send] : pending_) {
      if (is_send) {
        buffer->abortWaitSend();
      } else {
        buffer->abortWaitRecv();
      }
    }
  }
  Error aborted_error(const std::string& what) const {
    return Error("rank " + std::to_string(global_rank()) + ": " + what + " of " + describe() +
                 " was aborted because this rank failed elsewhere");
  }

  // Catches collisions of channel names, which would share slots.
  void claim_channel(uint32_t id, const std::string& channel) {
    std::lock_guard lock(mutex_);
    auto [found, inserted] = channels_.emplace(id, channel);
    if (!inserted && found->second != channel) {
      throw Error("channels '" + found->second + "' and '" + channel + "' of " + describe() +
                  " hash alike; rename one of the streams");
    }
  }

 private:
  std::function<std::string(const std::vector<int>&)> diagnose_;
  std::mutex mutex_;
  bool aborted_ = false;
  std::map<UnboundBuffer*, bool> pending_;
  std::map<uint32_t, std::string> channels_;
};

// One operation in progress: its name for messages and its deadline.
struct Operation {
  std::string what;  // "all_reduce #3 on channel 'dp_reduce'"
  Clock::time_point start = Clock::now();
  Clock::time_point deadline;
};

// The sends and receives of one step of an operation; wait() completes them all.
class Exchange {
 public:
  Exchange(GlooGroup& group, const Operation& operation) : group_(group), operation_(operation) {}
  ~Exchange() {
    for (Entry& entry : entries_) group_.untrack(entry.buffer.get());
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void send(const void* data, size_t bytes, int peer, uint64_t slot) {
    if (bytes == 0) return;
    Entry& entry = add(const_cast<void*>(data), bytes, peer, true);
    try {
      entry.buffer->send(peer, slot);
    } catch (const std::exception& failure) {
      // Posting fails at once when the peer's connection is already gone.
      throw failed(entry, gloo_message(failure.what()));
    }
  }
  void recv(void* data, size_t bytes, int peer, uint64_t slot) {
    if (bytes == 0) return;
    Entry& entry = add(data, bytes, peer, false);
    try {
      entry.buffer->recv(peer, slot);
    } catch (const std::exception& failure) {
      throw failed(entry, gloo_message(failure.what()));
    }
  }

  // Waits for every transfer; throws piper::Error naming the peer that did not complete.
  void wait() {
    for (Entry& entry : entries_) {
      // Rounded up: Gloo's timeout must not end before the operation's deadline.
      const auto left =
          std::max(std::chrono::ceil<std::chrono::milliseconds>(operation_.deadline - Clock::now()),
                   std::chrono::milliseconds(1));
      bool completed = false;
      try {
        completed = entry.is_send ? entry.buffer->waitSend(left) : entry.buffer->waitRecv(left);
      } catch (const std::exception& failure) {
        throw failed(entry, gloo_message(failure.what()));
      }
      if (!completed) throw group_.aborted_error(operation_.what);
    }
  }

 private:
  struct Entry {
    std::unique_ptr<UnboundBuffer> buffer;
    int peer;
    bool is_send;
  };

  Entry& add(void* data, size_t bytes, int peer, bool is_send) {
    Entry& entry = entries_.emplace_back(
        Entry{group_.context->createUnboundBuffer(data, bytes), peer, is_send});
    try {
      group_.track(entry.buffer.get(), is_send, operation_.what);
    } catch (...) {
      entries_.pop_back();
      throw;
    }
    return entry;
  }

  Error failed(const Entry& entry, const std::string& reason) const {
    const std::string peer =
        "rank " + std::to_string(group_.ranks[static_cast<size_t>(entry.peer)]);
    // Gloo's own timeout is the time left to the deadline, so it means the deadline passed,
    // though its clock may fire a few milliseconds early and then close the pair, which is
    // reported as "Application timeout caused pair closure".
    const bool timed_out = Clock::now() >= operation_.deadline ||
                           reason.find("Timed out") != std::string::npos ||
                           reason.find("timeout caused pair closure") != std::string::npos;
    std::string message = "rank " + std::to_string(group_.global_rank()) + " ";
    if (timed_out) {
      message += "waited " + elapsed_text(operation_.start) + " s in " + operation_.what + " of " +
                 group_.describe() + (entry.is_send ? " to send to " : " for data from ") + peer;
    } else {
      message += "lost " + peer + " in " + operation_.what + " of " + group_.describe() +
                 " after " + elapsed_text(operation_.start) + " s (" + reason + ")";
    }
    return Error(message + group_.diagnose());
  }

  GlooGroup& group_;
  const Operation& operation_;
  std::vector<Entry> entries_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<GlooGroup> group, std::string channel)
      : group_(std::move(group)),
        channel_name_(std::move(channel)),
        channel_(channel_id(channel_name_)) {
    group_->claim_channel(channel_, channel_name_);
  }

  int rank() const override { return group_->rank; }
  int size() const override { return static_cast<int>(group_->ranks.size()); }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::reduce_scatter;

  void all_reduce(void* buffer, size_t count, ElementType type, bool average) override {
    const Operation op = begin("all_reduce");
    const size_t n = static_cast<size_t>(size()), e = element_size(type);
    if (n == 1 || count == 0) return;
    auto* data = static_cast<uint8_t*>(buffer);
    if (n == 2 && count * e <= kPairExchangeBytes) {
      // One exchange of the whole buffer instead of the ring's two of halves: half the round
      // trips, and each member adds its own values and the other's, the same bits on both
      // (a + b == b + a) and the same as the ring's.
      uint8_t* incoming = scratch(count * e);
      Exchange exchange(*group_, op);
      exchange.recv(incoming, count * e, left(), slot(0));
      exchange.send(data, count * e, right(), slot(0));
      exchange.wait();
      add(data, data, incoming, count, type);
      if (average) divide(data, count, n, type);
      return;
    }
    auto begin_of = [&](size_t chunk) { return count * chunk / n; };
    auto size_of = [&](size_t chunk) { return begin_of(chunk + 1) - begin_of(chunk); };
    uint8_t* incoming = scratch((count / n + 1) * e);  // chunk sizes differ by at most one
    const size_t r = static_cast<size_t>(rank());
    // Reduce-scatter: after n-1 steps this member holds the sum of chunk (r+1) mod n.
    for (size_t step = 0; step + 1 < n; ++step) {
      const size_t send_chunk = (r + n - step) % n, recv_chunk = (r + 2 * n - step - 1) % n;
      Exchange exchange(*group_, op);
      exchange.recv(incoming, size_of(recv_chunk) * e, left(), slot(step));
      exchange.send(data + begin_of(send_chunk) * e, size_of(send_chunk) * e, right(), slot(step));
      exchange.wait();
      uint8_t* target = data + begin_of(recv_chunk) * e;
      add(target, target, incoming, size_of(recv_chunk), type);
    }
    if (average) {
      const size_t own = (r + 1) % n;
      divide(data + begin_of(own) * e, size_of(own), n, type);
    }
    // All-gather of the reduced chunks, so every member ends with the same bits.
    for (size_t step = 0; step + 1 < n; ++step) {
      const size_t send_chunk = (r + 1 + n - step) % n, recv_chunk = (r + n - step) % n;
      Exchange exchange(*group_, op);
      exchange.recv(data + begin_of(recv_chunk) * e, size_of(recv_chunk) * e, left(),
                    slot(n + step));
      exchange.send(data + begin_of(send_chunk) * e, size_of(send_chunk) * e, right(),
                    slot(n + step));
      exchange.wait();
    }
  }

  void reduce_scatter(const void* input, void* output, size_t count_per_rank, ElementType type,
                      bool average) override {
    const Operation op = begin("reduce_scatter");
    const size_t n = static_cast<size_t>(size()), k = count_per_rank;
    const size_t r = static_cast<size_t>(rank()), bytes = k * element_size(type);
    const auto* in = static_cast<const uint8_t*>(input);
    auto* out = static_cast<uint8_t*>(output);
    if (k == 0) return;
    if (n == 1) {
      std::memmove(out, in, bytes);
      return;
    }
    // Partial sums travel right around the ring; chunk c is complete at member c after n-1 steps.
    uint8_t* incoming = scratch(2 * bytes);
    uint8_t* partial = incoming + bytes;
    const uint8_t* outgoing = in + ((r + n - 1) % n) * bytes;
    for (size_t step = 0; step + 1 < n; ++step) {
      const size_t recv_chunk = (r + 2 * n - step - 2) % n;
      Exchange exchange(*group_, op);
      exchange.recv(incoming, bytes, left(), slot(step));
      exchange.send(outgoing, bytes, right(), slot(step));
      exchange.wait();
      add(step + 2 == n ? out : partial, incoming, in + recv_chunk * bytes, k, type);
      outgoing = partial;
    }
    if (average) divide(out, k, n, type);
  }

  void all_gather(const void* input, void* output, size_t count_per_rank,
                  ElementType type) override {
    const Operation op = begin("all_gather");
    const size_t n = static_cast<size_t>(size()), bytes = count_per_rank * element_size(type);
    const size_t r = static_cast<size_t>(rank());
    auto* out = static_cast<uint8_t*>(output);
    if (bytes == 0) return;
    std::memmove(out + r * bytes, input, bytes);
    for (size_t step = 0; step + 1 < n; ++step) {
      const size_t send_chunk = (r + n - step) % n, recv_chunk = (r + 2 * n - step - 1) % n;
      Exchange exchange(*group_, op);
      exchange.recv(out + recv_chunk * bytes, bytes, left(), slot(step));
      exchange.send(out + send_chunk * bytes, bytes, right(), slot(step));
      exchange.wait();
    }
  }

  void broadcast(void* data, size_t bytes, int root) override {
    const Operation op = begin("broadcast");
    if (root < 0 || root >= size()) {
      throw Error("broadcast from member " + std::to_string(root) + " of " + group_->describe() +
                  ", which has " + std::to_string(size()) + " members");
    }
    if (size() == 1 || bytes == 0) return;
    Exchange exchange(*group_, op);
    if (rank() == root) {
      for (int peer = 0; peer < size(); ++peer) {
        if (peer != root) exchange.send(data, bytes, peer, slot(0));
      }
    } else {
      exchange.recv(data, bytes, root, slot(0));
    }
    exchange.wait();
  }

  void all_to_all(const void* in, void* out, size_t bytes_per_rank) override {
    const Operation op = begin("all_to_all");
    const size_t n = static_cast<size_t>(size()), r = static_cast<size_t>(rank());
    if (bytes_per_rank == 0) return;
    const char* source = static_cast<const char*>(in);
    std::vector<char> copy;
    if (in == out) {  // the sends must read the input before the receives overwrite it
      copy.assign(source, source + n * bytes_per_rank);
      source = copy.data();
    }
    char* target = static_cast<char*>(out);
    Exchange exchange(*group_, op);
    for (size_t peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      exchange.recv(target + peer * bytes_per_rank, bytes_per_rank, static_cast<int>(peer),
                    slot(0));
      exchange.send(source + peer * bytes_per_rank, bytes_per_rank, static_cast<int>(peer),
                    slot(0));
    }
    std::memmove(target + r * bytes_per_rank, source + r * bytes_per_rank, bytes_per_rank);
    exchange.wait();
  }

  void all_to_all_v(const std::vector<const void*>& send, const std::vector<size_t>& send_bytes,
                    const std::vector<void*>& recv,
                    const std::vector<size_t>& recv_bytes) override {
    const Operation op = begin("all_to_all_v");
    const size_t r = static_cast<size_t>(rank());
    Exchange exchange(*group_, op);
    for (size_t peer = 0; peer < static_cast<size_t>(size()); ++peer) {
      if (peer == r) continue;
      exchange.recv(recv.at(peer), recv_bytes.at(peer), static_cast<int>(peer), slot(0));
      exchange.send(send.at(peer), send_bytes.at(peer), static_cast<int>(peer), slot(0));
    }
    if (send_bytes.at(r) != recv_bytes.at(r)) {
      throw Error("rank " + std::to_string(group_->global_rank()) + ": all_to_all_v sends " +
                  std::to_string(send_bytes[r]) + " bytes to itself but receives " +
                  std::to_string(recv_bytes[r]));
    }
    if (send_bytes[r] > 0) std::memmove(recv.at(r), send.at(r), send_bytes[r]);
    exchange.wait();
  }

  void send(const void* data, size_t bytes, int peer, int tag) override {
    transfer(const_cast<void*>(data), bytes, peer, tag, true);
  }
  void recv(void* data, size_t bytes, int peer, int tag) override {
    transfer(data, bytes, peer, tag, false);
  }

  std::unique_ptr<Communicator> channel(const std::string& name) override {
    return std::make_unique<GlooCommunicator>(group_, name);
  }
  void abort() override { group_->abort(); }

 private:
  int left() const { return (rank() + size() - 1) % size(); }
  int right() const { return (rank() + 1) % size(); }
  // The channel's receive buffer of at least `bytes`, kept for the next operation, so that a
  // bucket-sized buffer is not allocated, zeroed and faulted in by every collective. It stays
  // as large as the largest receive (half the largest bucket, for a ring of two).
  uint8_t* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }
  uint64_t slot(size_t step) const {
    return collective_slot(channel_, operation_, static_cast<uint32_t>(step));
  }

  // Numbers the next collective of this channel (the same number on every member).
  Operation begin(const char* kind) {
    ++operation_;
    Operation op;
    op.what = std::string(kind) + " #" + std::to_string(operation_) +
              (channel_name_.empty() ? "" : " on channel '" + channel_name_ + "'");
    op.deadline = op.start + group_->timeout;
    return op;
  }

  void transfer(void* data, size_t bytes, int peer, int tag, bool is_send) {
    Operation op;
    op.what = std::string(is_send ? "send" : "recv") + " of tag " + std::to_string(tag);
    op.deadline = op.start + group_->timeout;
    if (peer < 0 || peer >= size() || peer == rank()) {
      throw Error("rank " + std::to_string(group_->global_rank()) + ": " + op.what +
                  " with member " + std::to_string(peer) + " of " + group_->describe() +
                  ", which is not another member");
    }
    Exchange exchange(*group_, op);
    if (is_send) {
      exchange.send(data, bytes, peer, transfer_slot(tag));
    } else {
      exchange.recv(data, bytes, peer, transfer_slot(tag));
    }
    exchange.wait();
  }

  std::shared_ptr<GlooGroup> group_;
  std::string channel_name_;
  uint32_t channel_;
  uint32_t operation_ = 0;
  std::vector<uint8_t> scratch_;
};

}  // namespace

GlooCommunicatorFactory::GlooCommunicatorFactory(gloo::rendezvous::Store& store, int rank,
                                                 GlooOptions options)
    : store_(store), rank_(rank), options_(std::move(options)) {}

GlooCommunicatorFactory::~GlooCommunicatorFactory() = default;

std::unique_ptr<Communicator> GlooCommunicatorFactory::connect(const std::string& name,
                                                               const std::vector<int>& ranks) {
  const std::string members = name + " (ranks " + rank_list(ranks) + ")";
  const auto position = std::find(ranks.begin(), ranks.end(), rank_);
  if (position == ranks.end()) {
    throw Error("rank " + std::to_string(rank_) + " is not a member of " + members);
  }
  if (std::set<int>(ranks.begin(), ranks.end()).size() != ranks.size()) {
    throw Error(members + " lists a rank twice");
  }
  auto group = std::make_shared<GlooGroup>(name, ranks, static_cast<int>(position - ranks.begin()),
                                           options_.timeout, options_.diagnose);
  const Clock::time_point start = Clock::now();
  gloo::rendezvous::PrefixStore store(options_.key_prefix + "/" + name, store_);
  // Meet first, so that a member that never comes is named.
  try {
    store.set("joined/" + std::to_string(rank_), {'1'});
  } catch (const std::exception& failure) {
    throw Error("rank " + std::to_string(rank_) + " cannot join " + members + ": " +
                failure.what());
  }
  std::vector<std::string> keys;
  for (int member : ranks) keys.push_back("joined/" + std::to_string(member));
  const std::vector<std::string> missing = wait_for_keys(store, keys, options_.timeout);
  if (!missing.empty()) {
    std::vector<int> absent;
    for (const std::string& key : missing) absent.push_back(std::stoi(key.substr(7)));
    std::string message = "rank " + std::to_string(rank_) + " waited " + elapsed_text(start) +
                          " s to connect " + members + ": " +
                          (absent.size() == 1 ? "rank " : "ranks ") + rank_list(absent) +
                          " did not join";
    if (options_.diagnose) {
      try {
        const std::string known = options_.diagnose(absent);
        if (!known.empty()) message += "; " + known;
      } catch (const std::exception&) {
      }
    }
    throw Error(message);
  }
  try {
    if (!device_) {
      gloo::transport::tcp::attr attr;
      if (options_.iface.empty()) {
        attr.hostname = options_.hostname;
      } else {
        attr.iface = options_.iface;
      }
      device_ = create_device(attr);
    }
    auto context =
        std::make_shared<gloo::rendezvous::Context>(group->rank, static_cast<int>(ranks.size()));
    context->setTimeout(options_.timeout);
    context->connectFullMesh(store, device_);
    group->context = std::move(context);
  } catch (const std::exception& failure) {
    throw Error("rank " + std::to_string(rank_) + " cannot connect " + members + " (listening on " +
                (options_.iface.empty() ? options_.hostname : "interface " + options_.iface) +
                "): " + gloo_message(failure.what()) + group->diagnose());
  }
  return std::make_unique<GlooCommunicator>(std::move(group), "");
}

}  // namespace piper::engine
