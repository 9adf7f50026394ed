#include "engine/cuda/check.h"

#include <string>

#include "formats/error.h"

namespace piper::engine::cuda {

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw Error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
              cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")");
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
              cublasLtGetStatusString(status) + " (" + cublasLtGetStatusName(status) + ")");
}

}  // namespace piper::engine::cuda
