#include "engine/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "engine/comm/store.h"
#include "engine/cuda/check.h"
#include "engine/cuda/context.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

using Clock = std::chrono::steady_clock;

// How often a channel's watchdog looks at the operations in flight.
constexpr auto kWatchInterval = std::chrono::milliseconds(100);

void check_nccl(ncclResult_t status, ncclComm_t comm, const char* call, const char* file,
                int line) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  const char* detail = ncclGetLastError(comm);
  throw Error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
              ncclGetErrorString(status) +
              (detail && *detail ? std::string(" (") + detail + ")" : ""));
}

#define PIPER_NCCL_CHECK(call, comm) check_nccl((call), (comm), #call, __FILE__, __LINE__)

// One NCCL communicator and what its members agree on.
struct Group {
  std::string name;  // "group 3", for messages and store keys
  std::vector<int> ranks;
  int member = 0;  // this process's index in `ranks`
};

// "0,1,3": `ranks` but `skip`.
std::string rank_list(const std::vector<int>& ranks, int skip = -1) {
  std::string text;
  for (int r : ranks) {
    if (r != skip) text += (text.empty() ? "" : ",") + std::to_string(r);
  }
  return text;
}

std::string describe(const Group& group, int rank) {
  return "rank " + std::to_string(rank) + ", NCCL " + group.name + " (ranks " +
         rank_list(group.ranks) + ")";
}

// Device memory for one operation, freed in stream order once the work issued meanwhile is
// done.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    PIPER_CUDA_CHECK(cudaMallocAsync(&data_, bytes, stream_));
  }
  ~Scratch() { cudaFreeAsync(data_, stream_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

ncclDataType_t nccl_type(ElementType type) {
  return type == ElementType::kFloat32 ? ncclFloat32 : ncclBfloat16;
}

class NcclCommunicator;

// The channels of one group, so that aborting the group reaches every one.
struct Channels {
  std::mutex mutex;
  bool aborted = false;
  std::vector<NcclCommunicator*> live;
};

// An operation issued to the stream and not yet seen done.
struct InFlight {
  std::string what;   // "all_reduce", for messages
  std::string peers;  // "rank 3", "ranks 1,2,3"
  cudaEvent_t done;   // recorded after the operation
  Clock::time_point issued;
};

// One channel: an NCCL communicator created at its first operation. Operations return once
// issued to the stream, as the interface's contract allows; a watchdog thread then sees them
// done, or after the timeout aborts the communicator (which ends the stuck device work) and
// reports the failure to the CUDA context, where the stream's finish throws it.
class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(gloo::rendezvous::Store& store, int rank, cuda::CudaContext& context,
                   const NcclOptions& options, Group group, std::string channel,
                   std::shared_ptr<Channels> channels)
      : store_(store),
        rank_(rank),
        context_(context),
        options_(options),
        group_(std::move(group)),
        channel_(std::move(channel)),
        channels_(std::move(channels)) {
    std::lock_guard lock(channels_->mutex);
    aborted_ = channels_->aborted;
    channels_->live.push_back(this);
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard lock(channels_->mutex);
      std::erase(channels_->live, this);
    }
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    std::lock_guard lock(mutex_);
    for (const InFlight& operation : in_flight_) cudaEventDestroy(operation.done);
    if (comm_ == nullptr) return;
    // A ready communicator finishes its work first; one that failed or never became ready
    // cannot, and is aborted.
    if (ready_) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }

  bool host_buffers() const override { return false; }
  int rank() const override { return group_.member; }
  int size() const override { return static_cast<int>(group_.ranks.size()); }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::reduce_scatter;

  void all_reduce(void* data, size_t count, ElementType type, bool average) override {
    issue("all_reduce", others(), [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(data, data, count, nccl_type(type), average ? ncclAvg : ncclSum, comm,
                           stream);
    });
  }

  void reduce_scatter(const void* input, void* out, size_t count_per_rank, ElementType type,
                      bool average) override {
    const auto* in = static_cast<const uint8_t*>(input);
    const size_t bytes = count_per_rank * element_size(type);
    // NCCL works in place only when out is this member's slice of in.
    const bool in_place = out == in + bytes * static_cast<size_t>(rank());
    std::unique_ptr<Scratch> staged;
    void* target = out;
    if (!in_place && overlap(in, bytes * static_cast<size_t>(size()), out, bytes)) {
      staged = std::make_unique<Scratch>(bytes, context_.stream());
      target = staged->data();
    }
    issue("reduce_scatter", others(), [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclReduceScatter(in, target, count_per_rank, nccl_type(type),
                               average ? ncclAvg : ncclSum, comm, stream);
    });
    if (staged) copy(out, target, bytes);
  }

  void all_gather(const void* in, void* output, size_t count_per_rank, ElementType type) override {
    auto* out = static_cast<uint8_t*>(output);
    const size_t bytes = count_per_rank * element_size(type);
    const bool in_place = in == out + bytes * static_cast<size_t>(rank());
    std::unique_ptr<Scratch> staged;
    if (!in_place && overlap(in, bytes, out, bytes * static_cast<size_t>(size()))) {
      staged = std::make_unique<Scratch>(bytes, context_.stream());
      copy(staged->data(), in, bytes);
      in = staged->data();
    }
    issue("all_gather", others(), [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(in, out, count_per_rank, nccl_type(type), comm, stream);
    });
  }

  void broadcast(void* data, size_t bytes, int root) override {
    issue("broadcast", others(), [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, stream);
    });
  }

  void all_to_all(const void* in, void* out, size_t bytes_per_rank) override {
    const size_t whole = bytes_per_rank * static_cast<size_t>(size());
    std::unique_ptr<Scratch> staged;
    if (overlap(in, whole, out, whole)) {
      staged = std::make_unique<Scratch>(whole, context_.stream());
      copy(staged->data(), in, whole);
      in = staged->data();
    }
    issue("all_to_all", others(), [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAlltoAll(in, out, bytes_per_rank, ncclUint8, comm, stream);
    });
  }

  // NCCL's all-to-all-v: one group of point-to-point calls, a send and a receive per member.
  void all_to_all_v(const std::vector<const void*>& send, const std::vector<size_t>& send_bytes,
                    const std::vector<void*>& recv,
                    const std::vector<size_t>& recv_bytes) override {
    issue("all_to_all_v", others(), [&](ncclComm_t comm, cudaStream_t stream) {
      ncclResult_t status = ncclGroupStart();
      for (int peer = 0; peer < size() && status == ncclSuccess; ++peer) {
        const size_t p = static_cast<size_t>(peer);
        if (send_bytes.at(p) > 0) {
          status = ncclSend(send.at(p), send_bytes[p], ncclUint8, peer, comm, stream);
        }
        if (status == ncclSuccess && recv_bytes.at(p) > 0) {
          status = ncclRecv(recv.at(p), recv_bytes[p], ncclUint8, peer, comm, stream);
        }
      }
      const ncclResult_t ended = ncclGroupEnd();
      return status != ncclSuccess ? status : ended;
    });
  }

  void send(const void* data, size_t bytes, int peer, int) override {
    issue("send", member(peer), [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclSend(data, bytes, ncclUint8, peer, comm, stream);
    });
  }

  void recv(void* data, size_t bytes, int peer, int) override {
    issue("recv", member(peer), [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclRecv(data, bytes, ncclUint8, peer, comm, stream);
    });
  }

  std::unique_ptr<Communicator> channel(const std::string& name) override {
    return std::make_unique<NcclCommunicator>(store_, rank_, context_, options_, group_,
                                              channel_.empty() ? name : channel_ + "/" + name,
                                              channels_);
  }

  // Aborts every channel of the group. Callable from any thread: ncclCommAbort also ends the
  // device work a missing peer holds up.
  void abort() override {
    std::lock_guard lock(channels_->mutex);
    channels_->aborted = true;
    for (NcclCommunicator* channel : channels_->live) channel->abort_channel();
  }

 private:
  void abort_channel() {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  std::string where(const std::string& what) const {
    return describe(group_, rank_) + ": " + what + " on channel '" + channel_ + "'";
  }

  // "rank 3": the global rank of member `peer`.
  std::string member(int peer) const {
    return "rank " + std::to_string(group_.ranks.at(static_cast<size_t>(peer)));
  }
  // "ranks 1,2": the other members.
  std::string others() const {
    return (group_.ranks.size() > 2 ? "ranks " : "rank ") + rank_list(group_.ranks, rank_);
  }

  // "rank 0 waited 300 s in all_reduce on channel 'dp' of NCCL group 3 (ranks 0,1) for rank 1
  // (--timeout 300 s), which did not take part; ..."
  std::string timed_out(const std::string& what, const std::string& peers,
                        Clock::time_point since) const {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since);
    return "rank " + std::to_string(rank_) + " waited " + seconds_text(waited) + " s in " + what +
           " on channel '" + channel_ + "' of NCCL " + group_.name + " (ranks " +
           rank_list(group_.ranks) + ") for " + peers + " (--timeout " +
           seconds_text(options_.timeout) +
           " s), which did not take part; check the other ranks' logs for why they are not "
           "responding, or raise --timeout";
  }

  // Throws when this channel can take no more operations. Needs mutex_.
  void check_open(const char* what) const {
    if (!failure_.empty()) throw Error(failure_);
    if (aborted_) throw Error(where(what) + " after the communicator was aborted");
  }

  // Aborts the communicator, which ends the device work it holds up, and remembers why: later
  // operations throw `message`. Needs mutex_.
  void give_up(const std::string& message) {
    failure_ = message;
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  void copy(void* dst, const void* src, size_t bytes) {
    PIPER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, context_.stream()));
  }

  // Member 0 publishes the channel's NCCL id; the others read it (waiting up to the store's
  // timeout). Then every member starts NCCL's non-blocking initialization.
  void start(const char* what) {
    const std::string key = options_.key_prefix + "/nccl/" + group_.name + "/" + channel_;
    ncclUniqueId id;
    if (group_.member == 0) {
      PIPER_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
      store_.set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      const std::vector<char> value = store_.get(key);
      if (value.size() != sizeof id.internal) {
        throw Error(where(what) + ": the store holds a malformed NCCL id under '" + key + "'");
      }
      std::memcpy(id.internal, value.data(), sizeof id.internal);
    }
    {
      std::lock_guard lock(mutex_);
      check_open(what);
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      context_.activate();
      PIPER_NCCL_CHECK(ncclCommInitRankConfig(&comm_, size(), id, group_.member, &config), comm_);
    }
    watchdog_ = std::thread([this] { watch(); });
  }

  // Why an NCCL `state` of the communicator is a failure of `what`, or "". Needs mutex_ and comm_.
  std::string nccl_failure(const std::string& what, ncclResult_t state) const {
    if (state == ncclInProgress || state == ncclSuccess) return "";
    return where(what) + " failed: " + ncclGetErrorString(state) + " (" + ncclGetLastError(comm_) +
           ")";
  }
  // Gives up on the communicator and throws `failure`, unless it is "". Needs mutex_.
  void fail(const std::string& failure) {
    if (failure.empty()) return;
    give_up(failure);
    throw Error(failure);
  }

  // Waits while NCCL reports work in progress (initialization, or an enqueue that has not
  // finished); throws for an abort, and gives up on the communicator for an error or past the
  // timeout since `since`.
  void settle(const char* what, const std::string& peers, Clock::time_point since) {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        check_open(what);
        ncclResult_t state = ncclSuccess;
        PIPER_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_);
        fail(nccl_failure(what, state));
        if (state == ncclSuccess) return;
        if (Clock::now() - since > options_.timeout) {
          fail(ready_ ? timed_out(what, peers, since)
                      : where(what) + ": the NCCL communicator was not ready after " +
                            seconds_text(options_.timeout) +
                            " s; every member must reach it (is a rank missing?)");
        }
      }
      std::this_thread::yield();
    }
  }

  template <typename Call>
  void issue(const char* what, const std::string& peers, Call call) {
    const Clock::time_point issued = Clock::now();
    bool started = false;
    {
      std::lock_guard lock(mutex_);
      check_open(what);
      started = comm_ != nullptr;
    }
    if (!started) start(what);
    if (!ready_) {
      settle(what, peers, issued);
      ready_ = true;
    }
    ncclResult_t status = ncclSuccess;
    {
      std::lock_guard lock(mutex_);
      check_open(what);
      status = call(comm_, context_.stream());
      fail(nccl_failure(what, status));
    }
    if (status == ncclInProgress) settle(what, peers, issued);
    // The watchdog takes it from here: the operation completes in stream order.
    cudaEvent_t done = nullptr;
    PIPER_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    const cudaError_t recorded = cudaEventRecord(done, context_.stream());
    if (recorded != cudaSuccess) cudaEventDestroy(done);
    PIPER_CUDA_CHECK(recorded);
    std::lock_guard lock(mutex_);
    in_flight_.push_back({what, peers, done, issued});
  }

  // The watchdog's thread: every kWatchInterval, forgets the operations done, and gives up on
  // the communicator when NCCL reports an error or the oldest operation outlasts the timeout.
  // The failure also goes to the CUDA context, so that the step fails where its streams finish.
  void watch() {
    std::unique_lock lock(mutex_);
    std::string failure;
    try {
      context_.activate();
    } catch (const Error& error) {
      failure = where("the NCCL watchdog") + ": " + error.what();
    }
    while (failure.empty() && !wake_.wait_for(lock, kWatchInterval, [this] { return stopping_; })) {
      if (comm_ != nullptr && failure_.empty()) failure = poll();
    }
    if (failure.empty()) return;
    give_up(failure);
    context_.report_failure(failure);
  }

  // Forgets the operations done; returns why to give up on the communicator, or "". Needs mutex_
  // and comm_.
  std::string poll() {
    // A CUDA error instead of "done" is the stream's, which its finish reports.
    while (!in_flight_.empty() && cudaEventQuery(in_flight_.front().done) != cudaErrorNotReady) {
      cudaEventDestroy(in_flight_.front().done);
      in_flight_.pop_front();
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t status = ncclCommGetAsyncError(comm_, &state);
    if (status != ncclSuccess) state = status;
    const InFlight* oldest = in_flight_.empty() ? nullptr : &in_flight_.front();
    std::string failure = nccl_failure(oldest ? oldest->what : "an operation", state);
    if (failure.empty() && oldest && Clock::now() - oldest->issued > options_.timeout) {
      failure = timed_out(oldest->what, oldest->peers, oldest->issued);
    }
    return failure;
  }

  gloo::rendezvous::Store& store_;
  int rank_;
  cuda::CudaContext& context_;
  const NcclOptions& options_;
  Group group_;
  std::string channel_;
  std::shared_ptr<Channels> channels_;
  // Guards what the owning thread shares with abort() and the watchdog: the members below.
  std::mutex mutex_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  std::string failure_;  // why the watchdog or a wait gave up on comm_
  std::deque<InFlight> in_flight_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread watchdog_;
  bool ready_ = false;  // used by the owning thread alone
};

}  // namespace

NcclCommunicatorFactory::NcclCommunicatorFactory(gloo::rendezvous::Store& store, int rank,
                                                 cuda::CudaContext& context, NcclOptions options)
    : store_(store), rank_(rank), context_(context), options_(std::move(options)) {}

std::unique_ptr<Communicator> NcclCommunicatorFactory::connect(const std::string& name,
                                                               const std::vector<int>& ranks) {
  Group group{name, ranks, 0};
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) {
    throw Error("rank " + std::to_string(rank_) + " connects to NCCL " + name +
                ", which it is not a member of");
  }
  group.member = static_cast<int>(me - ranks.begin());
  return std::make_unique<NcclCommunicator>(store_, rank_, context_, options_, std::move(group), "",
                                            std::make_shared<Channels>());
}

}  // namespace piper::engine
