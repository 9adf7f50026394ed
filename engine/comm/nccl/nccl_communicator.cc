#include "engine/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/cuda/check.h"
#include "engine/cuda/context.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

using Clock = std::chrono::steady_clock;

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

std::string describe(const Group& group, int rank) {
  std::string ranks;
  for (int r : group.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  return "rank " + std::to_string(rank) + ", NCCL " + group.name + " (ranks " + ranks + ")";
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

// One channel: an NCCL communicator created at its first operation.
class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(gloo::rendezvous::Store& store, int rank, cuda::CudaContext& context,
                   const NcclOptions& options, Group group, std::string channel)
      : store_(store),
        rank_(rank),
        context_(context),
        options_(options),
        group_(std::move(group)),
        channel_(std::move(channel)) {}

  ~NcclCommunicator() override {
    std::lock_guard lock(mutex_);
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

  void all_reduce(float* data, size_t count, bool average) override {
    issue("all_reduce", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(data, data, count, ncclFloat32, average ? ncclAvg : ncclSum, comm,
                           stream);
    });
  }

  void reduce_scatter(const float* in, float* out, size_t count_per_rank, bool average) override {
    const size_t bytes = count_per_rank * sizeof(float);
    // NCCL works in place only when out is this member's slice of in.
    const bool in_place = out == in + count_per_rank * static_cast<size_t>(rank());
    std::unique_ptr<Scratch> staged;
    float* target = out;
    if (!in_place && overlap(in, bytes * static_cast<size_t>(size()), out, bytes)) {
      staged = std::make_unique<Scratch>(bytes, context_.stream());
      target = static_cast<float*>(staged->data());
    }
    issue("reduce_scatter", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclReduceScatter(in, target, count_per_rank, ncclFloat32, average ? ncclAvg : ncclSum,
                               comm, stream);
    });
    if (staged) copy(out, target, bytes);
  }

  void all_gather(const float* in, float* out, size_t count_per_rank) override {
    const size_t bytes = count_per_rank * sizeof(float);
    const bool in_place = in == out + count_per_rank * static_cast<size_t>(rank());
    std::unique_ptr<Scratch> staged;
    if (!in_place && overlap(in, bytes, out, bytes * static_cast<size_t>(size()))) {
      staged = std::make_unique<Scratch>(bytes, context_.stream());
      copy(staged->data(), in, bytes);
      in = static_cast<const float*>(staged->data());
    }
    issue("all_gather", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(in, out, count_per_rank, ncclFloat32, comm, stream);
    });
  }

  void broadcast(void* data, size_t bytes, int root) override {
    issue("broadcast", [&](ncclComm_t comm, cudaStream_t stream) {
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
    issue("all_to_all", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAlltoAll(in, out, bytes_per_rank, ncclUint8, comm, stream);
    });
  }

  void send(const void* data, size_t bytes, int peer, int) override {
    issue("send", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclSend(data, bytes, ncclUint8, peer, comm, stream);
    });
  }

  void recv(void* data, size_t bytes, int peer, int) override {
    issue("recv", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclRecv(data, bytes, ncclUint8, peer, comm, stream);
    });
  }

  std::unique_ptr<Communicator> channel(const std::string& name) override {
    return std::make_unique<NcclCommunicator>(store_, rank_, context_, options_, group_,
                                              channel_.empty() ? name : channel_ + "/" + name);
  }

  // Callable from any thread: ncclCommAbort also ends the device work a missing peer holds up.
  void abort() override {
    std::lock_guard lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  std::string where(const char* what) const {
    return describe(group_, rank_) + ": " + what + " on channel '" + channel_ + "'";
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
    std::lock_guard lock(mutex_);
    if (aborted_) throw Error(where(what) + " after the communicator was aborted");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    context_.activate();
    PIPER_NCCL_CHECK(ncclCommInitRankConfig(&comm_, size(), id, group_.member, &config), comm_);
    deadline_ = Clock::now() + options_.timeout;
  }

  // Waits while NCCL reports work in progress (initialization, or an enqueue that has not
  // finished); throws for an error or an abort, and when initialization outlasts the deadline.
  void settle(const char* what) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      {
        std::lock_guard lock(mutex_);
        if (aborted_) throw Error(where(what) + " after the communicator was aborted");
        PIPER_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_);
        if (state != ncclInProgress && state != ncclSuccess) {
          throw Error(where(what) + " failed: " + ncclGetErrorString(state) + " (" +
                      ncclGetLastError(comm_) + ")");
        }
      }
      if (state == ncclSuccess) return;
      if (!ready_ && Clock::now() > deadline_) {
        throw Error(where(what) + ": the NCCL communicator was not ready after " +
                    std::to_string(options_.timeout.count() / 1000) +
                    " s; every member must reach it (is a rank missing?)");
      }
      std::this_thread::yield();
    }
  }

  template <typename Call>
  void issue(const char* what, Call call) {
    bool started = false;
    {
      std::lock_guard lock(mutex_);
      if (aborted_) throw Error(where(what) + " after the communicator was aborted");
      started = comm_ != nullptr;
    }
    if (!started) start(what);
    if (!ready_) {
      settle(what);
      ready_ = true;
    }
    ncclResult_t status = ncclSuccess;
    {
      std::lock_guard lock(mutex_);
      if (aborted_) throw Error(where(what) + " after the communicator was aborted");
      status = call(comm_, context_.stream());
    }
    if (status == ncclInProgress) {
      settle(what);
    } else if (status != ncclSuccess) {
      throw Error(where(what) + " failed: " + ncclGetErrorString(status) + " (" +
                  ncclGetLastError(comm_) + ")");
    }
  }

  gloo::rendezvous::Store& store_;
  int rank_;
  cuda::CudaContext& context_;
  const NcclOptions& options_;
  Group group_;
  std::string channel_;
  std::mutex mutex_;  // guards comm_ and aborted_ against abort() from another thread
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  bool ready_ = false;  // used by the owning thread alone
  Clock::time_point deadline_;
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
  return std::make_unique<NcclCommunicator>(store_, rank_, context_, options_, std::move(group),
                                            "");
}

}  // namespace piper::engine
