// What the CUDA kernel factories (*_ops.cc) share: dtype checks that name the tensor
// as the CPU kernels do, and the kernel that copies bytes on the calling thread's queue.
#pragma once

#include <string>

#include "engine/cuda/elementwise.h"
#include "engine/cuda/registry.h"
#include "engine/cuda/shapes.h"

namespace piper::engine::cuda {

// The element type of `view`, which must be float32 or int64 (or, with `allow_bool`, bool);
// fails naming `what` otherwise.
Element element_type(const KernelArgs& args, const TensorView& view, const std::string& what,
                     bool allow_bool = false);

// `count` doubles of device scratch, freed with the last copy of the pointer; null for 0.
std::shared_ptr<double> device_doubles(size_t count);

// Copies between host and device memory through the calling thread's queue, complete on return:
// for constants read and tables written while kernels are prepared.
void copy_to_host(CudaContext& context, void* host, const void* device, size_t bytes);
void copy_to_device(CudaContext& context, void* device, const void* host, size_t bytes);

// A kernel copying `bytes` from `src` to `dst` (both device memory; nothing when they are the
// same address).
std::unique_ptr<PreparedKernel> copy_kernel(CudaContext& context, const void* src, void* dst,
                                            size_t bytes);

}  // namespace piper::engine::cuda
