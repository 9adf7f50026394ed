#include "engine/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "engine/cpu/widened_kernel.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

constexpr size_t kAlignment = 64;
// Allocations of at least a huge page (the step's arena, large weights) are aligned to one and
// asked for in huge pages, which Linux gives only on request (transparent_hugepage=madvise,
// Debian's default). A product's operands span megabytes, more than the L2 TLB covers in 4 KiB
// pages: with huge pages the benchmark model's products ran 6% faster in training.
constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

CpuBackend::CpuBackend() {
  register_elementwise_kernels(table_);
  register_gemm_kernels(table_);
  register_reduce_kernels(table_);
  register_shape_kernels(table_);
  register_loss_kernels(table_);
  register_optimizer_kernels(table_);
  register_data_parallel_kernels(table_);
  register_indexing_kernels(table_);
  register_nd_indexing_kernels(table_);
  register_non_zero_kernels(table_);
  register_layout_kernels(table_);
  register_sequence_kernels(table_);
  register_einsum_kernels(table_);
  register_nll_loss_kernels(table_);
  register_math_kernels(table_);
  register_activation_kernels(table_);
  register_normalization_kernels(table_);
  register_logical_kernels(table_);
  register_dropout_kernels(table_);
  register_hardmax_kernels(table_);
  register_fused_attention_kernels(table_);
  register_fused_bias_gelu_kernels(table_);
}

void* CpuBackend::allocate(size_t bytes) {
  const size_t align = bytes >= kHugePage ? kHugePage : kAlignment;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* data = std::aligned_alloc(align, rounded == 0 ? align : rounded);
  if (data == nullptr) {
    throw Error("cpu backend: cannot allocate " + std::to_string(bytes) +
                " bytes of host memory; use a plan with a smaller memory footprint");
  }
  if (align == kHugePage) madvise(data, rounded, MADV_HUGEPAGE);  // a hint: failure is harmless
  std::memset(data, 0, rounded == 0 ? kAlignment : rounded);
  return data;
}

void CpuBackend::release(void* data) { std::free(data); }

void CpuBackend::upload(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes != 0) {
    std::memcpy(device_dst, host_src, bytes);
  }
}

void CpuBackend::download(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes != 0) {
    std::memcpy(host_dst, device_src, bytes);
  }
}

std::vector<std::string> CpuBackend::supported_ops() const {
  std::vector<std::string> ops;
  for (const auto& [op, factory] : table_) {
    ops.push_back(op);
  }
  return ops;
}

std::unique_ptr<PreparedKernel> CpuBackend::prepare(const plan::Kernel& kernel,
                                                    std::vector<TensorView> inputs,
                                                    std::vector<TensorView> outputs) {
  const auto found = table_.find(kernel.op_type());
  if (found == table_.end()) {
    std::string supported;
    for (const auto& op : supported_ops()) {
      supported += (supported.empty() ? "" : ", ") + op;
    }
    throw Error("op type '" + kernel.op_type() +
                "' is not supported by the cpu backend; supported ops: " + supported);
  }
  const bool casts = kernel.op_type() == "Cast" || kernel.op_type() == "CastLike";
  if (!casts && has_bfloat16(inputs, outputs)) {
    return prepare_widened(found->second, kernel, std::move(inputs), std::move(outputs));
  }
  const KernelArgs args(kernel, std::move(inputs), std::move(outputs));
  return found->second(args);
}

}  // namespace piper::engine::cpu
