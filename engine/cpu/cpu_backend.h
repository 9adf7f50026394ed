// The CPU backend: host memory and the reference kernels (OpenBLAS for GEMMs).
#pragma once

#include "engine/cpu/kernel_registry.h"
#include "engine/runtime/backend.h"

namespace piper::engine::cpu {

class CpuBackend : public Backend {
 public:
  CpuBackend();

  std::string name() const override { return "cpu"; }
  void* allocate(size_t bytes) override;
  void release(void* data) override;
  void upload(void* device_dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* device_src, size_t bytes) override;
  std::unique_ptr<PreparedKernel> prepare(const plan::Kernel& kernel,
                                          std::vector<TensorView> inputs,
                                          std::vector<TensorView> outputs) override;

  // Op types this backend runs, sorted.
  std::vector<std::string> supported_ops() const;

 private:
  KernelTable table_;
};

}  // namespace piper::engine::cpu
