// The CUDA backend: device memory from cudaMalloc (never managed memory), one CUDA
// stream per plan stream and one CUDA event per plan event, cuBLASLt for matrix
// products and Piper's kernels for the other ops. Ops without a CUDA kernel run the
// CPU backend's kernel on host copies of their tensors (host_ops()), so that every
// plan the CPU backend runs also runs here. Kernels compute in float32; bfloat16
// tensors are rounded when written. The CUDA kernels of bfloat16_ops() take them as
// they are; the other CUDA kernels run on float32 device copies of them (widened before
// each run, outputs rounded back after); host ops get them as they are, as the CPU
// backend takes them.
#pragma once

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/context.h"
#include "engine/cuda/registry.h"
#include "engine/runtime/backend.h"

namespace piper::engine::cuda {

class CudaBackend : public Backend {
 public:
  // Throws piper::Error in one line, suggesting --device cpu, when no GPU is usable.
  CudaBackend();

  std::string name() const override { return "cuda"; }
  void* allocate(size_t bytes) override;
  void release(void* data) override;
  void upload(void* device_dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* device_src, size_t bytes) override;
  void copy(void* device_dst, const void* device_src, size_t bytes) override;
  bool host_memory() const override { return false; }
  size_t memory_capacity() const override;
  std::unique_ptr<DeviceStreams> make_device_streams(size_t streams, int events) override;
  std::unique_ptr<PreparedKernel> prepare(const plan::Kernel& kernel,
                                          std::vector<TensorView> inputs,
                                          std::vector<TensorView> outputs) override;

  // Op types with a CUDA kernel, sorted.
  std::vector<std::string> device_ops() const;
  // Op types that run through the CPU kernel on host copies, sorted.
  std::vector<std::string> host_ops() const;
  // Op types whose CUDA kernels take bfloat16 tensors themselves, sorted.
  static std::vector<std::string> bfloat16_ops();

  CudaContext& context() { return context_; }

 private:
  CudaContext context_;
  CudaKernelTable table_;
  cpu::CpuBackend host_;
};

}  // namespace piper::engine::cuda
