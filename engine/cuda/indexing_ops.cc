// Gather and piper.GatherGrad on CUDA. Checks follow engine/cpu/indexing.cc; an index
// out of range fails when the step's stream finishes, naming the op and the index.
#include "engine/cuda/indexing.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

GatherShape gather_shape(const KernelArgs& args, CudaContext& context, const Shape& data,
                         const TensorView& indices, const Shape& gathered,
                         const std::string& gathered_what) {
  args.expect_dtype(indices, plan::INT64, "indices (input 1)");
  const int64_t rank = static_cast<int64_t>(data.size());
  if (rank == 0) args.fail("data must have at least one dimension");
  const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", 0), rank);
  Shape expected(data.begin(), data.begin() + axis);
  expected.insert(expected.end(), indices.shape.begin(), indices.shape.end());
  expected.insert(expected.end(), data.begin() + axis + 1, data.end());
  if (expected != gathered) {
    args.fail("gathering " + shape_string(data) + " along axis " + std::to_string(axis) +
              " with indices " + shape_string(indices.shape) + " gives " + shape_string(expected) +
              " but " + gathered_what + " has shape " + shape_string(gathered));
  }
  GatherShape s;
  s.outer = product(data, 0, static_cast<size_t>(axis));
  s.axis = data[static_cast<size_t>(axis)];
  s.inner = product(data, static_cast<size_t>(axis) + 1, data.size());
  s.count = indices.elements();
  s.fault = context.device_fault();
  s.fault_code = context.fault_code(
      args.op() + ": index",
      "is out of range for an axis of size " + std::to_string(s.axis) + "; check the indices data");
  return s;
}

std::unique_ptr<PreparedKernel> gather_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "data (input 0)");
  const GatherShape s = gather_shape(args, context, x.shape, args.input(1), y.shape, "the output");
  return make_kernel([&context, s, width = dtype_size(y.dtype), px = x.data,
                      indices = args.input(1).as<const int64_t>(),
                      py = y.data](const StepContext&) {
    launch_gather(s, width, px, indices, py, context.stream());
  });
}

std::unique_ptr<PreparedKernel> gather_grad_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& dy = args.input(0);
  const TensorView& dx = args.output(0);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(dx, plan::FLOAT32, "dX (output 0)");
  const GatherShape s =
      gather_shape(args, context, dx.shape, args.input(1), dy.shape, "dY (input 0)");
  return make_kernel([&context, s, pdy = dy.as<const float>(),
                      indices = args.input(1).as<const int64_t>(),
                      pdx = dx.as<float>()](const StepContext&) {
    launch_gather_grad(s, pdy, indices, pdx, context.stream());
  });
}

}  // namespace

void register_indexing_kernels(CudaKernelTable& table) {
  table["Gather"] = gather_factory;
  table["piper.GatherGrad"] = gather_grad_factory;
}

}  // namespace piper::engine::cuda
