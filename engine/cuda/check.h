// One check per vendor library: a failed call throws piper::Error naming the call,
// the file and line it was made at, and the library's reason, e.g.
// "cudaMalloc(&data, bytes) failed at engine/cuda/cuda_backend.cc:40: out of memory".
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace piper::engine::cuda {

void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace piper::engine::cuda

#define PIPER_CUDA_CHECK(call) ::piper::engine::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define PIPER_CUBLAS_CHECK(call) \
  ::piper::engine::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch (`kernel<<<...>>>(...)`): a bad launch configuration, or a fault of
// earlier work on the device, fails here naming `kernel`.
#define PIPER_CUDA_LAUNCH_CHECK(kernel) \
  ::piper::engine::cuda::check_cuda(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
