// The CUDA kernel table: op type -> factory that validates a kernel's tensors and
// attributes once (with the CPU backend's KernelArgs, so errors read alike) and
// returns the prepared kernel, which issues its work to the calling thread's queue.
// Each family's *_ops.cc registers its ops; the device code lives in the family's
// .cu file behind plain launch functions.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "engine/cpu/kernel_registry.h"
#include "engine/cuda/context.h"

namespace piper::engine::cuda {

using cpu::KernelArgs;
using cpu::make_kernel;

using CudaKernelFactory =
    std::function<std::unique_ptr<PreparedKernel>(const KernelArgs&, CudaContext&)>;
using CudaKernelTable = std::map<std::string, CudaKernelFactory>;

void register_elementwise_kernels(CudaKernelTable& table);      // elementwise_ops.cc
void register_gemm_kernels(CudaKernelTable& table);             // gemm_ops.cc
void register_reduce_kernels(CudaKernelTable& table);           // reduce_ops.cc
void register_layout_kernels(CudaKernelTable& table);           // layout_ops.cc
void register_normalization_kernels(CudaKernelTable& table);    // normalization_ops.cc
void register_indexing_kernels(CudaKernelTable& table);         // indexing_ops.cc
void register_loss_kernels(CudaKernelTable& table);             // loss_ops.cc
void register_optimizer_kernels(CudaKernelTable& table);        // optimizer_ops.cc
void register_fused_kernels(CudaKernelTable& table);            // fused_ops.cc
void register_slicing_kernels(CudaKernelTable& table);          // slicing_ops.cc
void register_dropout_kernels(CudaKernelTable& table);          // dropout_ops.cc
void register_activation_kernels(CudaKernelTable& table);       // activation_ops.cc
void register_power_kernels(CudaKernelTable& table);            // power_ops.cc
void register_extremum_grad_kernels(CudaKernelTable& table);    // extremum_grad_ops.cc
void register_selection_kernels(CudaKernelTable& table);        // selection_ops.cc
void register_scan_kernels(CudaKernelTable& table);             // scan_ops.cc
void register_gather_elements_kernels(CudaKernelTable& table);  // gather_elements_ops.cc
void register_nd_indexing_kernels(CudaKernelTable& table);      // nd_indexing_ops.cc
void register_non_zero_kernels(CudaKernelTable& table);         // non_zero_ops.cc
void register_einsum_kernels(CudaKernelTable& table);           // einsum_ops.cc

}  // namespace piper::engine::cuda
