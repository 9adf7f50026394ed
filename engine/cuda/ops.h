// What the CUDA kernel factories (*_ops.cc) share: dtype checks that name the tensor
// as the CPU kernels do, device scratch, and the kernel that copies bytes on the calling
// thread's queue.
#pragma once

#include <memory>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/elementwise.h"
#include "engine/cuda/registry.h"
#include "engine/cuda/shapes.h"

namespace piper::engine::cuda {

// The element type of `view`, which must be float32 or int64 (or, with `allow_bool`, bool);
// fails naming `what` otherwise.
Element element_type(const KernelArgs& args, const TensorView& view, const std::string& what,
                     bool allow_bool = false);

// Whether `dtype` is a float dtype the kernels take as FloatView: float32 or bfloat16.
bool is_float(plan::DType dtype);
// Fails naming `what` unless `view` is float32 or bfloat16.
void expect_float(const KernelArgs& args, const TensorView& view, const std::string& what);
// `view`, float32 or bfloat16, as the kernels read and write it.
FloatView float_view(const TensorView& view);
// cuBLASLt's type of float32 or bfloat16 elements.
cudaDataType_t blas_type(plan::DType dtype);
// `args` with its bfloat16 tensors labelled float32 (same data), for the shared checks of the
// CPU kernels (engine/cpu), which take float32 only, in factories whose kernels read both.
KernelArgs float32_labelled(const KernelArgs& args);

// `count` elements of device scratch, freed with the last copy of the pointer; null for 0.
template <typename T>
std::shared_ptr<T> device_array(size_t count) {
  T* data = nullptr;
  if (count > 0) PIPER_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data), count * sizeof(T)));
  return std::shared_ptr<T>(data, [](T* p) { cudaFree(p); });
}

// Copies between host and device memory through the calling thread's queue, complete on return:
// for constants read and tables written while kernels are prepared.
void copy_to_host(CudaContext& context, void* host, const void* device, size_t bytes);
void copy_to_device(CudaContext& context, void* device, const void* host, size_t bytes);

// A kernel copying `bytes` from `src` to `dst` (both device memory; nothing when they are the
// same address).
std::unique_ptr<PreparedKernel> copy_kernel(CudaContext& context, const void* src, void* dst,
                                            size_t bytes);

}  // namespace piper::engine::cuda
