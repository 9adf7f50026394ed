// piper.FusedAttention and piper.FusedAttentionGrad through cuDNN's fused flash attention
// (SDPA), where cuDNN runs them: bfloat16 operands, no mask or one cuDNN can take as a bias,
// and, for the gradient, the forward's Y (input 7). The flash kernels never hold [T, Tk] scores.
//
// The forward writes each row's log Σ exp(S) as RowMax and 1 as RowInvSum, a pair that gives
// the same P = exp(S − RowMax) · RowInvSum as the row maximum and 1 / Σ exp(S − max) do, so
// either backward reads either forward's statistics.
//
// cuDNN is loaded when first needed (libcudnn.so.9), so the engine runs without it.
#pragma once

#include <memory>

#include "engine/cuda/attention.h"
#include "engine/cuda/registry.h"

namespace piper::engine::cuda {

// The kernel, or null when cuDNN does not run this attention (then fused_ops.cc's cuBLASLt
// kernels do): the operands are float32, a bool mask fills with a finite value, cuDNN is not
// built in (cmake/PiperCuda.cmake), not loadable or has no engine for the shapes, or the
// environment sets PIPER_CUDNN_ATTENTION=0.
std::unique_ptr<PreparedKernel> cudnn_attention(const KernelArgs& args, CudaContext& context,
                                                const Attention& a);
std::unique_ptr<PreparedKernel> cudnn_attention_grad(const KernelArgs& args, CudaContext& context,
                                                     const Attention& a);

}  // namespace piper::engine::cuda
