#include "engine/cuda/ops.h"

#include <cuda_runtime.h>

#include "engine/cuda/check.h"

namespace piper::engine::cuda {

Element element_type(const KernelArgs& args, const TensorView& view, const std::string& what,
                     bool allow_bool) {
  switch (view.dtype) {
    case plan::FLOAT32:
      return Element::kFloat32;
    case plan::INT64:
      return Element::kInt64;
    case plan::BOOL:
      if (allow_bool) return Element::kBool;
      [[fallthrough]];
    default:
      args.fail(what + " has dtype " + dtype_name(view.dtype) + ", expected float32, int64" +
                (allow_bool ? " or bool" : ""));
  }
}

std::shared_ptr<double> device_doubles(size_t count) {
  double* data = nullptr;
  if (count > 0) PIPER_CUDA_CHECK(cudaMalloc(&data, count * sizeof(double)));
  return std::shared_ptr<double>(data, [](double* p) { cudaFree(p); });
}

void copy_to_host(CudaContext& context, void* host, const void* device, size_t bytes) {
  PIPER_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, context.stream()));
  PIPER_CUDA_CHECK(cudaStreamSynchronize(context.stream()));
}

void copy_to_device(CudaContext& context, void* device, const void* host, size_t bytes) {
  PIPER_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, context.stream()));
  PIPER_CUDA_CHECK(cudaStreamSynchronize(context.stream()));
}

std::unique_ptr<PreparedKernel> copy_kernel(CudaContext& context, const void* src, void* dst,
                                            size_t bytes) {
  return make_kernel([&context, src, dst, bytes](const StepContext&) {
    if (src == dst || bytes == 0) return;
    PIPER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, context.stream()));
  });
}

}  // namespace piper::engine::cuda
