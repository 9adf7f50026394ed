// Built instead of cudnn_attention.cc when the cudnn-frontend headers were not found
// (cmake/PiperCuda.cmake): attention always runs on fused_ops.cc's cuBLASLt kernels.
#include "engine/cuda/cudnn_attention.h"

namespace piper::engine::cuda {

std::unique_ptr<PreparedKernel> cudnn_attention(const KernelArgs&, CudaContext&, const Attention&) {
  return nullptr;
}

std::unique_ptr<PreparedKernel> cudnn_attention_grad(const KernelArgs&, CudaContext&,
                                                     const Attention&) {
  return nullptr;
}

}  // namespace piper::engine::cuda
