// Reductions on CUDA: ONNX's Reduce* ops (engine/cpu/reduce_math.h; keepdims, axes as an
// attribute or an input), piper.SumTo and its adjoint piper.BroadcastTo, piper.ReduceProdGrad.
// Checks follow engine/cpu/reduce.cc.
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

// Reduces x over the dimensions where `kept` (x's rank; broadcasts to x) is 1 and x's is not.
std::unique_ptr<PreparedKernel> make_reduction(CudaContext& context, cpu::ReduceFormula reduction,
                                               const TensorView& x, const Shape& kept,
                                               const TensorView& y, double scale) {
  const ReducePlan plan = reduce_plan(reduction, x.shape, kept, scale);
  const std::shared_ptr<double> partials = device_array<double>(
      plan.chunks > 1 ? static_cast<size_t>(plan.chunks * plan.outputs.total) : 0);
  return make_kernel(
      [&context, plan, partials, fx = float_view(x), fy = float_view(y)](const StepContext&) {
        launch_reduce(plan, fx, fy, partials.get(), context.stream());
      });
}

// The same for int64 x and y.
std::unique_ptr<PreparedKernel> make_int64_reduction(CudaContext& context,
                                                     cpu::ReduceFormula reduction,
                                                     const TensorView& x, const Shape& kept,
                                                     const TensorView& y) {
  const ReducePlan plan = reduce_plan(reduction, x.shape, kept, 1.0);
  const std::shared_ptr<int64_t> partials = device_array<int64_t>(
      plan.chunks > 1 ? static_cast<size_t>(plan.chunks * plan.outputs.total) : 0);
  return make_kernel([&context, plan, partials, px = x.as<const int64_t>(),
                      py = y.as<int64_t>()](const StepContext&) {
    launch_reduce_int64(plan, px, py, partials.get(), context.stream());
  });
}

// The optional axes input: a plan constant, read from device memory once.
std::vector<int64_t> axes_input(const KernelArgs& args, CudaContext& context) {
  if (!args.has_input(1)) return {};
  const TensorView& t = args.input(1);
  args.expect_dtype(t, plan::INT64, "axes (input 1)");
  if (t.rank() != 1) args.fail("axes (input 1) must be 1-D, got shape " + shape_string(t.shape));
  std::vector<int64_t> axes(static_cast<size_t>(t.elements()));
  copy_to_host(context, axes.data(), t.data, t.bytes());
  return axes;
}

// ONNX's Reduce* ops as the CPU's (engine/cpu/reduce.cc): axes from the optional input or else
// the attribute, keepdims, noop_with_empty_axes.
CudaKernelFactory reduce_factory(cpu::ReduceFormula r) {
  return [r](const KernelArgs& args, CudaContext& context) -> std::unique_ptr<PreparedKernel> {
    args.expect_inputs(1, 2);
    args.expect_outputs(1, 1);
    const TensorView& x = args.input(0);
    const TensorView& y = args.output(0);
    const bool int64 = cpu::check_reduction_dtypes(args, r) == plan::INT64;
    const std::vector<int64_t> axes =
        args.has_input(1) ? axes_input(args, context) : args.attributes().get_ints("axes", {});
    int64_t count = 1;
    const Shape kept = cpu::check_reduction(args, axes, &count);
    if (int64) return make_int64_reduction(context, r, x, kept, y);
    return make_reduction(context, r, x, kept, y, r.mean ? 1.0 / static_cast<double>(count) : 1.0);
  };
}

// piper.SumTo: X summed down to Y's shape; each float32 or bfloat16 (summed in double).
std::unique_ptr<PreparedKernel> sum_to_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  expect_float(args, x, "input 0");
  expect_float(args, y, "output 0");
  if (!cpu::broadcasts_to(y.shape, x.shape)) {
    args.fail("output shape " + shape_string(y.shape) + " does not broadcast to the input shape " +
              shape_string(x.shape) + ", so X cannot be summed down to it");
  }
  Shape kept(x.shape.size() - y.shape.size(), 1);
  kept.insert(kept.end(), y.shape.begin(), y.shape.end());
  return make_reduction(context, cpu::ReduceFormula{}, x, kept, y, 1.0);
}

// piper.BroadcastTo: X with size-1 axes inserted at `axes` (Y's numbering), broadcast to Y's
// shape, times `scale`.
std::unique_ptr<PreparedKernel> broadcast_to_factory(const KernelArgs& args, CudaContext& context) {
  const Shape expanded = cpu::check_broadcast_to(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const auto scale = static_cast<float>(args.attributes().get_float("scale", 1.0));
  const StridedIndex index = broadcast_index(y.shape, {expanded});
  return make_kernel(
      [&context, index, scale, fx = float_view(x), fy = float_view(y)](const StepContext&) {
        launch_scaled_copy(index, fx, fy, scale, context.stream());
      });
}

// piper.ReduceProdGrad(dY, X): the CPU's (engine/cpu/reduce.cc), each group's zero count and
// product of nonzeros folded into float scratch first.
std::unique_ptr<PreparedKernel> reduce_prod_grad_factory(const KernelArgs& args,
                                                         CudaContext& context) {
  const Shape kept = cpu::check_reduce_prod_grad(args);
  const TensorView& x = args.input(1);
  const ReducePlan zeros = reduce_plan(cpu::kZeroCount, x.shape, kept, 1.0);
  const ReducePlan product = reduce_plan(cpu::kNonzeroProduct, x.shape, kept, 1.0);
  const auto groups = static_cast<size_t>(num_elements(kept));
  const std::shared_ptr<float> scratch = device_array<float>(2 * groups);
  const std::shared_ptr<double> partials =
      device_array<double>(zeros.chunks > 1 ? static_cast<size_t>(zeros.chunks) * groups : 0);
  return make_kernel([&context, zeros, product, groups, scratch, partials,
                      index = broadcast_index(x.shape, {x.shape, kept}),
                      pdy = args.input(0).as<const float>(), px = x.as<const float>(),
                      pdx = args.output(0).as<float>()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    float* counts = scratch.get();
    float* products = scratch.get() + groups;
    const FloatView fx{const_cast<float*>(px), false};
    launch_reduce(zeros, fx, FloatView{counts, false}, partials.get(), stream);
    launch_reduce(product, fx, FloatView{products, false}, partials.get(), stream);
    launch_reduce_prod_grad(index, pdy, px, counts, products, pdx, stream);
  });
}

}  // namespace

void register_reduce_kernels(CudaKernelTable& table) {
  for (const cpu::NamedFormula& named : cpu::kReduceFormulas) {
    table[named.op] = reduce_factory(named.reduction);
  }
  table["piper.SumTo"] = sum_to_factory;
  table["piper.BroadcastTo"] = broadcast_to_factory;
  table["piper.ReduceProdGrad"] = reduce_prod_grad_factory;
}

}  // namespace piper::engine::cuda
