#include "engine/cuda/context.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

#include "engine/cuda/check.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

// cuBLASLt's recommended workspace on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct Binding {
  const CudaContext* context = nullptr;
  const Queue* queue = nullptr;
};
thread_local Binding t_binding;

// The launcher's local rank; RANK last, as piper-launch starts every rank on one machine.
int local_rank() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "RANK"}) {
    if (const char* value = std::getenv(name)) {
      char* end = nullptr;
      const long rank = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && rank >= 0) return static_cast<int>(rank);
    }
  }
  return 0;
}

class CudaStreams : public DeviceStreams {
 public:
  CudaStreams(CudaContext& context, size_t streams, int events) : context_(context) {
    try {
      for (size_t s = 0; s < streams; ++s) queues_.push_back(context_.make_queue());
      events_.resize(static_cast<size_t>(events), nullptr);
      for (cudaEvent_t& event : events_) {
        PIPER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaStreams() override { release(); }

  void bind(size_t stream) override {
    context_.activate();
    context_.bind(&queues_.at(stream));
  }
  void record(size_t stream, int event) override {
    PIPER_CUDA_CHECK(cudaEventRecord(events_.at(event), queues_.at(stream).stream));
  }
  void wait(size_t stream, int event) override {
    PIPER_CUDA_CHECK(cudaStreamWaitEvent(queues_.at(stream).stream, events_.at(event), 0));
  }
  void finish(size_t stream) override {
    context_.bind(nullptr);
    PIPER_CUDA_CHECK(cudaStreamSynchronize(queues_.at(stream).stream));
    context_.check_faults(queues_.at(stream).stream);
  }

 private:
  void release() {
    for (cudaEvent_t event : events_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (Queue& queue : queues_) context_.release_queue(queue);
  }

  CudaContext& context_;
  std::vector<Queue> queues_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

CudaContext::CudaContext() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the error, so that later calls do not report it again
    throw Error(std::string("--device cuda: no usable CUDA GPU (") +
                (status != cudaSuccess ? cudaGetErrorString(status) : "no device found") +
                "); run with --device cpu");
  }
  device_ = local_rank() % count;
  activate();
  PIPER_CUBLAS_CHECK(cublasLtCreate(&blas_));
  try {
    own_ = make_queue();
    PIPER_CUDA_CHECK(cudaMalloc(&fault_, sizeof(DeviceFault)));
    PIPER_CUDA_CHECK(cudaMemsetAsync(fault_, 0, sizeof(DeviceFault), own_.stream));
    PIPER_CUDA_CHECK(cudaStreamSynchronize(own_.stream));
  } catch (...) {
    cudaFree(fault_);
    release_queue(own_);
    cublasLtDestroy(blas_);
    throw;
  }
}

CudaContext::~CudaContext() {
  cudaFree(fault_);
  release_queue(own_);
  cublasLtDestroy(blas_);
}

void CudaContext::activate() const { PIPER_CUDA_CHECK(cudaSetDevice(device_)); }

const Queue& CudaContext::queue() const {
  return t_binding.context == this ? *t_binding.queue : own_;
}

void CudaContext::bind(const Queue* queue) const {
  t_binding = queue ? Binding{this, queue} : Binding{};
}

Queue CudaContext::make_queue() const {
  Queue queue;
  PIPER_CUDA_CHECK(cudaStreamCreateWithFlags(&queue.stream, cudaStreamNonBlocking));
  const cudaError_t status = cudaMalloc(&queue.workspace, kWorkspaceBytes);
  if (status != cudaSuccess) {
    cudaStreamDestroy(queue.stream);
    check_cuda(status, "cudaMalloc(&queue.workspace, kWorkspaceBytes)", __FILE__, __LINE__);
  }
  queue.workspace_bytes = kWorkspaceBytes;
  return queue;
}

void CudaContext::release_queue(Queue& queue) const {
  if (queue.stream != nullptr) cudaStreamSynchronize(queue.stream);
  cudaFree(queue.workspace);
  if (queue.stream != nullptr) cudaStreamDestroy(queue.stream);
  queue = Queue{};
}

int32_t CudaContext::fault_code(std::string subject, std::string rest) {
  return fault_code(
      [subject = std::move(subject), rest = std::move(rest)](int64_t value, int64_t position) {
        return subject + " " + std::to_string(value) + " at position " + std::to_string(position) +
               " " + rest;
      });
}

int32_t CudaContext::fault_code(std::function<std::string(int64_t, int64_t)> format) {
  std::lock_guard lock(faults_mutex_);
  faults_.push_back(std::move(format));
  return static_cast<int32_t>(faults_.size());
}

void CudaContext::report_failure(std::string message) {
  std::lock_guard lock(faults_mutex_);
  if (failure_.empty()) failure_ = std::move(message);
}

void CudaContext::check_faults(cudaStream_t stream) {
  DeviceFault fault{};
  PIPER_CUDA_CHECK(cudaMemcpyAsync(&fault, fault_, sizeof fault, cudaMemcpyDeviceToHost, stream));
  PIPER_CUDA_CHECK(cudaStreamSynchronize(stream));
  {
    std::lock_guard lock(faults_mutex_);
    if (!failure_.empty()) throw Error(std::exchange(failure_, std::string()));
  }
  if (fault.code == 0) return;
  PIPER_CUDA_CHECK(cudaMemsetAsync(fault_, 0, sizeof fault, stream));
  PIPER_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::lock_guard lock(faults_mutex_);
  throw Error(faults_.at(static_cast<size_t>(fault.code - 1))(fault.value, fault.position));
}

std::unique_ptr<DeviceStreams> CudaContext::make_streams(size_t streams, int events) {
  activate();
  return std::make_unique<CudaStreams>(*this, streams, events);
}

}  // namespace piper::engine::cuda
