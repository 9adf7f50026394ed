// The GPU a CUDA backend runs on and where its work goes. Kernels are issued to the
// queue of the plan stream the calling thread is bound to (DeviceStreams, one CUDA
// stream per plan stream and one CUDA event per plan event), or to the context's own
// queue outside a step (loading a plan, tests that run kernels directly).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/cuda/fault.h"
#include "engine/runtime/backend.h"

namespace piper::engine::cuda {

// A CUDA stream and the cuBLASLt workspace of the matrix products issued to it.
struct Queue {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

class CudaContext {
 public:
  // Selects this process's GPU: the launcher's local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK,
  // SLURM_LOCALID, else RANK) modulo the number of GPUs it sees, else GPU 0. Throws piper::Error in
  // one line, suggesting --device cpu, when no GPU is usable.
  CudaContext();
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  // Makes this context's GPU the calling thread's current one.
  void activate() const;
  // The calling thread's queue: its bound plan stream's, or this context's own.
  const Queue& queue() const;
  cudaStream_t stream() const { return queue().stream; }
  cublasLtHandle_t blas() const { return blas_; }

  // Registers a fault kernels may report as `code`; its message reads
  // "<subject> <value> at position <position> <rest>", e.g. subject "Gather: index", rest "is
  // out of range for an axis of size 64; check the indices data".
  int32_t fault_code(std::string subject, std::string rest);
  // Registers a fault whose message `format(value, position)` writes.
  int32_t fault_code(std::function<std::string(int64_t value, int64_t position)> format);
  DeviceFault* device_fault() const { return fault_; }
  // After `stream`'s work: throws piper::Error for the first fault reported since the last
  // check (and clears it).
  void check_faults(cudaStream_t stream);
  // Reports a failure found on the host about device work (an NCCL operation that timed out),
  // which the next check_faults() throws, whichever stream it checks. The first report wins.
  void report_failure(std::string message);

  std::unique_ptr<DeviceStreams> make_streams(size_t streams, int events);

  // A queue with its own stream and workspace; release_queue() frees it.
  Queue make_queue() const;
  void release_queue(Queue& queue) const;
  // Binds the calling thread to `queue` (null: unbinds it).
  void bind(const Queue* queue) const;

 private:
  int device_ = 0;
  Queue own_;
  cublasLtHandle_t blas_ = nullptr;
  DeviceFault* fault_ = nullptr;
  std::mutex faults_mutex_;
  std::vector<std::function<std::string(int64_t, int64_t)>> faults_;
  std::string failure_;  // from report_failure(), guarded by faults_mutex_
};

}  // namespace piper::engine::cuda
