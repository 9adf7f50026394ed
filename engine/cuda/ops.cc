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

bool is_float(plan::DType dtype) { return dtype == plan::FLOAT32 || dtype == plan::BFLOAT16; }

void expect_float(const KernelArgs& args, const TensorView& view, const std::string& what) {
  if (!is_float(view.dtype)) {
    args.fail(what + " has dtype " + dtype_name(view.dtype) + ", expected float32 or bfloat16");
  }
}

FloatView float_view(const TensorView& view) {
  return FloatView{view.data, view.dtype == plan::BFLOAT16};
}

cudaDataType_t blas_type(plan::DType dtype) {
  return dtype == plan::BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F;
}

KernelArgs float32_labelled(const KernelArgs& args) {
  auto labelled = [](TensorView view) {
    if (view.dtype == plan::BFLOAT16) view.dtype = plan::FLOAT32;
    return view;
  };
  std::vector<TensorView> inputs, outputs;
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    inputs.push_back(args.has_input(i) ? labelled(args.input(i)) : TensorView{});
  }
  for (size_t i = 0; i < args.num_outputs(); ++i) {
    outputs.push_back(args.has_output(i) ? labelled(args.output(i)) : TensorView{});
  }
  return KernelArgs(args.kernel(), std::move(inputs), std::move(outputs));
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
