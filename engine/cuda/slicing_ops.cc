// Slice and piper.SliceGrad on CUDA, strided copies between the sliced region of the data and
// the sliced tensor, and Trilu. Checks follow engine/cpu/layout_ops.cc (slice_geometry.h,
// op_checks.h).
// The starts, ends, axes and steps are read once, when the kernel is prepared: the CPU kernel
// re-reads them before each run, but they are plan constants in practice.
#include "engine/cpu/op_checks.h"
#include "engine/cpu/slice_geometry.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/slicing.h"

namespace piper::engine::cuda {
namespace {

cpu::SliceParameters read_slice_parameters(const std::vector<TensorView>& views,
                                           CudaContext& context) {
  std::vector<std::vector<int64_t>> values;
  for (const TensorView& view : views) {
    std::vector<int64_t>& value = values.emplace_back();
    if (!view.present()) continue;
    value.resize(static_cast<size_t>(view.elements()));
    copy_to_host(context, value.data(), view.data, view.bytes());
  }
  return cpu::slice_parameters(views, values);
}

// Slice (backward = false): y = x[slice]. piper.SliceGrad (backward = true): dX = zeros with
// dX[slice] = dY.
std::unique_ptr<PreparedKernel> slice_kernel(const KernelArgs& args, CudaContext& context,
                                             bool backward) {
  const cpu::SliceParameters parameters = read_slice_parameters(cpu::check_slice(args), context);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const TensorView& data = backward ? y : x;
  const TensorView& sliced = backward ? x : y;
  const cpu::SliceGeometry geometry =
      cpu::slice_geometry(args.op(), parameters, data.shape, sliced.shape);
  const size_t width = dtype_size(y.dtype);
  const std::vector<int64_t> contiguous = cpu::contiguous_strides(sliced.shape);
  // Operand 0 is written, operand 1 read.
  const StridedIndex index =
      strided_index(sliced.shape, backward ? std::vector{geometry.strides, contiguous}
                                           : std::vector{contiguous, geometry.strides});
  char* region = static_cast<char*>(data.data) + geometry.base * static_cast<int64_t>(width);
  return make_kernel([&context, index, width, backward, region, px = x.data, py = y.data,
                      bytes = y.bytes()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    if (!backward) {
      launch_strided_copy(index, width, region, py, stream);
      return;
    }
    if (bytes > 0) PIPER_CUDA_CHECK(cudaMemsetAsync(py, 0, bytes, stream));
    launch_strided_copy(index, width, px, region, stream);
  });
}

// Trilu: the upper or lower triangle of each matrix in the last two dimensions.
std::unique_ptr<PreparedKernel> trilu_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_trilu(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  return make_kernel([&context, total = y.elements(), rows = x.shape[x.shape.size() - 2],
                      cols = x.shape.back(), upper = args.attributes().get_int("upper", 1) != 0,
                      pk = args.has_input(1) ? args.input(1).as<const int64_t>() : nullptr,
                      width = dtype_size(y.dtype), px = x.data, py = y.data](const StepContext&) {
    launch_trilu(total, rows, cols, upper, pk, width, px, py, context.stream());
  });
}

}  // namespace

void register_slicing_kernels(CudaKernelTable& table) {
  table["Trilu"] = trilu_factory;
  table["Slice"] = [](const KernelArgs& args, CudaContext& context) {
    return slice_kernel(args, context, false);
  };
  table["piper.SliceGrad"] = [](const KernelArgs& args, CudaContext& context) {
    return slice_kernel(args, context, true);
  };
}

}  // namespace piper::engine::cuda
