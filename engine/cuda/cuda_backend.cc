#include "engine/cuda/cuda_backend.h"

#include <algorithm>

#include "engine/cpu/widened_kernel.h"
#include "engine/cuda/check.h"
#include "engine/cuda/ops.h"
#include "engine/runtime/host_staging.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

// `factory`'s kernel, which takes float32 only, on float32 copies of the bfloat16 tensors in
// device memory the kernel owns (a tensor that is both input and output shares one copy), as
// the CPU backend runs its kernels (engine/cpu/widened_kernel.h): each run widens every copy,
// runs the kernel and rounds the outputs' copies back, on the calling thread's queue.
std::unique_ptr<PreparedKernel> prepare_widened(CudaContext& context, const plan::Kernel& kernel,
                                                std::vector<TensorView> inputs,
                                                std::vector<TensorView> outputs,
                                                const CudaKernelFactory& factory) {
  struct Copy {
    void* narrow;
    int64_t count;
    std::shared_ptr<float> wide;
    bool written;
  };
  std::vector<Copy> copies;
  auto widen_view = [&copies](TensorView& view, bool written) {
    if (!view.present() || view.dtype != plan::BFLOAT16) return;
    auto found = std::find_if(copies.begin(), copies.end(),
                              [&](const Copy& copy) { return copy.narrow == view.data; });
    if (found == copies.end()) {
      // One element at least: a present tensor keeps a non-null address.
      copies.push_back({view.data, view.elements(),
                        device_array<float>(std::max<int64_t>(view.elements(), 1)), false});
      found = copies.end() - 1;
    }
    found->written = found->written || written;
    view = TensorView{found->wide.get(), plan::FLOAT32, view.shape};
  };
  for (TensorView& view : inputs) widen_view(view, false);
  for (TensorView& view : outputs) widen_view(view, true);
  auto widen_all = [&context, copies] {
    for (const Copy& copy : copies) {
      launch_cast(Element::kBFloat16, Element::kFloat32, copy.count, copy.narrow, copy.wide.get(),
                  context.stream());
    }
  };
  widen_all();  // constant inputs hold their values already, and kernels may read them now
  const std::shared_ptr<PreparedKernel> inner =
      factory(KernelArgs(kernel, std::move(inputs), std::move(outputs)), context);
  return make_kernel([&context, copies, widen_all, inner](const StepContext& step) {
    widen_all();
    inner->run(step);
    for (const Copy& copy : copies) {
      if (copy.written) {
        launch_cast(Element::kFloat32, Element::kBFloat16, copy.count, copy.wide.get(), copy.narrow,
                    context.stream());
      }
    }
  });
}

}  // namespace

CudaBackend::CudaBackend() {
  register_elementwise_kernels(table_);
  register_gemm_kernels(table_);
  register_reduce_kernels(table_);
  register_layout_kernels(table_);
  register_normalization_kernels(table_);
  register_indexing_kernels(table_);
  register_loss_kernels(table_);
  register_optimizer_kernels(table_);
  register_fused_kernels(table_);
  register_slicing_kernels(table_);
  register_dropout_kernels(table_);
  register_activation_kernels(table_);
  register_power_kernels(table_);
  register_extremum_grad_kernels(table_);
  register_selection_kernels(table_);
  register_scan_kernels(table_);
  register_gather_elements_kernels(table_);
  register_nd_indexing_kernels(table_);
  register_non_zero_kernels(table_);
  register_einsum_kernels(table_);
}

void* CudaBackend::allocate(size_t bytes) {
  context_.activate();
  // cudaMalloc aligns to at least 256 bytes; one such unit stands in for 0 bytes.
  const size_t size = std::max<size_t>(bytes, 256);
  void* data = nullptr;
  const cudaError_t status = cudaMalloc(&data, size);
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    throw Error("cuda backend: cannot allocate " + std::to_string(bytes) + " bytes on GPU " +
                std::to_string(context_.device()) + " (" + cudaGetErrorString(status) + "; " +
                std::to_string(free >> 20) + " of " + std::to_string(total >> 20) +
                " MiB free); use a plan with a smaller memory footprint");
  }
  try {
    PIPER_CUDA_CHECK(cudaMemsetAsync(data, 0, size, context_.stream()));
    PIPER_CUDA_CHECK(cudaStreamSynchronize(context_.stream()));
  } catch (...) {
    cudaFree(data);
    throw;
  }
  return data;
}

size_t CudaBackend::memory_capacity() const {
  context_.activate();
  size_t free = 0, total = 0;
  PIPER_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total;
}

void CudaBackend::release(void* data) {
  if (data != nullptr) PIPER_CUDA_CHECK(cudaFree(data));
}

void CudaBackend::upload(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  context_.activate();
  const cudaStream_t stream = context_.stream();
  PIPER_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
  PIPER_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaBackend::download(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  context_.activate();
  const cudaStream_t stream = context_.stream();
  PIPER_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream));
  PIPER_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaBackend::copy(void* device_dst, const void* device_src, size_t bytes) {
  if (bytes == 0 || device_dst == device_src) return;
  const cudaStream_t stream = context_.stream();
  const auto* dst = static_cast<const char*>(device_dst);
  const auto* src = static_cast<const char*>(device_src);
  if (dst + bytes <= src || src + bytes <= dst) {
    PIPER_CUDA_CHECK(
        cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  // cudaMemcpy leaves overlapping ranges undefined: go through a stream-ordered temporary.
  void* temporary = nullptr;
  PIPER_CUDA_CHECK(cudaMallocAsync(&temporary, bytes, stream));
  PIPER_CUDA_CHECK(cudaMemcpyAsync(temporary, device_src, bytes, cudaMemcpyDeviceToDevice, stream));
  PIPER_CUDA_CHECK(cudaMemcpyAsync(device_dst, temporary, bytes, cudaMemcpyDeviceToDevice, stream));
  PIPER_CUDA_CHECK(cudaFreeAsync(temporary, stream));
}

std::unique_ptr<DeviceStreams> CudaBackend::make_device_streams(size_t streams, int events) {
  return context_.make_streams(streams, events);
}

std::vector<std::string> CudaBackend::device_ops() const {
  std::vector<std::string> ops;
  for (const auto& [op, factory] : table_) ops.push_back(op);
  return ops;
}

std::vector<std::string> CudaBackend::bfloat16_ops() {
  return {"Add",
          "Cast",
          "CastLike",
          "Concat",
          "Div",
          "Expand",
          "Flatten",
          "Gemm",
          "Identity",
          "MatMul",
          "Max",
          "Min",
          "Mul",
          "Reshape",
          "Slice",
          "Split",
          "Squeeze",
          "Sub",
          "Sum",
          "Transpose",
          "Unsqueeze",
          "Where",
          "piper.BiasGelu",
          "piper.BiasGeluGrad",
          "piper.FusedAttention",
          "piper.FusedAttentionGrad",
          "piper.MatMul",
          "piper.Shard",
          "piper.SliceGrad",
          "piper.SumTo"};
}

std::vector<std::string> CudaBackend::host_ops() const {
  std::vector<std::string> ops;
  for (const std::string& op : host_.supported_ops()) {
    if (!table_.count(op)) ops.push_back(op);
  }
  return ops;
}

std::unique_ptr<PreparedKernel> CudaBackend::prepare(const plan::Kernel& kernel,
                                                     std::vector<TensorView> inputs,
                                                     std::vector<TensorView> outputs) {
  context_.activate();
  const auto found = table_.find(kernel.op_type());
  if (found != table_.end()) {
    const std::vector<std::string> native = bfloat16_ops();
    if (cpu::has_bfloat16(inputs, outputs) &&
        std::find(native.begin(), native.end(), kernel.op_type()) == native.end()) {
      return prepare_widened(context_, kernel, std::move(inputs), std::move(outputs),
                             found->second);
    }
    const KernelArgs args(kernel, std::move(inputs), std::move(outputs));
    return found->second(args, context_);
  }
  const std::vector<std::string> on_host = host_ops();
  if (std::find(on_host.begin(), on_host.end(), kernel.op_type()) == on_host.end()) {
    std::string supported;
    for (const auto& op : device_ops()) supported += (supported.empty() ? "" : ", ") + op;
    for (const auto& op : on_host) supported += ", " + op + " (on the host)";
    throw Error("op type '" + kernel.op_type() +
                "' is not supported by the cuda backend; supported ops: " + supported);
  }
  return prepare_on_host(*this, std::move(inputs), std::move(outputs),
                         [&](std::vector<TensorView> host_in, std::vector<TensorView> host_out) {
                           return host_.prepare(kernel, std::move(host_in), std::move(host_out));
                         });
}

}  // namespace piper::engine::cuda
