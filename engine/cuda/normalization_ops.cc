// Row-wise normalizations on CUDA: Softmax, LogSoftmax, LayerNormalization and their
// gradients piper.SoftmaxGrad, piper.LogSoftmaxGrad, piper.LayerNormalizationGrad.
// Checks follow engine/cpu/normalization.cc.
#include "engine/cpu/layer_norm_geometry.h"
#include "engine/cuda/normalization.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

AxisRows axis_rows(const KernelArgs& args, const Shape& shape) {
  const auto rank = static_cast<int64_t>(shape.size());
  const int64_t a = args.normalize_axis(args.attributes().get_int("axis", -1), rank);
  AxisRows rows;
  rows.outer = product(shape, 0, static_cast<size_t>(a));
  rows.n = shape[static_cast<size_t>(a)];
  rows.inner = product(shape, static_cast<size_t>(a) + 1, shape.size());
  return rows;
}

template <bool kLog>
std::unique_ptr<PreparedKernel> softmax_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, plan::FLOAT32, "input 0");
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  args.expect_same_shape(x, "input 0", y, "output 0");
  return make_kernel([&context, rows = axis_rows(args, x.shape), px = x.as<const float>(),
                      py = y.as<float>()](const StepContext&) {
    launch_softmax(kLog, rows, px, py, context.stream());
  });
}

template <bool kLog>
std::unique_ptr<PreparedKernel> softmax_grad_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& dy = args.input(0);
  const TensorView& y = args.input(1);
  const TensorView& dx = args.output(0);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(y, plan::FLOAT32, "Y (input 1)");
  args.expect_dtype(dx, plan::FLOAT32, "dX (output 0)");
  args.expect_same_shape(dy, "dY (input 0)", dx, "dX (output 0)");
  args.expect_same_shape(y, "Y (input 1)", dx, "dX (output 0)");
  return make_kernel([&context, rows = axis_rows(args, y.shape), pdy = dy.as<const float>(),
                      py = y.as<const float>(), pdx = dx.as<float>()](const StepContext&) {
    launch_softmax_grad(kLog, rows, pdy, py, pdx, context.stream());
  });
}

float* optional_output(const KernelArgs& args, size_t i) {
  return args.has_output(i) ? args.output(i).as<float>() : nullptr;
}

std::unique_ptr<PreparedKernel> layer_norm_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 3);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, plan::FLOAT32, "X (input 0)");
  args.expect_dtype(y, plan::FLOAT32, "Y (output 0)");
  args.expect_same_shape(x, "X (input 0)", y, "Y (output 0)");
  const cpu::LayerNormRows v = cpu::layer_norm_rows(args, x);
  cpu::check_affine(args, x, v, args.input(1), "Scale (input 1)");
  const float* bias = nullptr;
  if (args.has_input(2)) {
    cpu::check_affine(args, x, v, args.input(2), "B (input 2)");
    bias = args.input(2).as<const float>();
  }
  if (args.has_output(1)) cpu::check_stats(args, args.output(1), v, "Mean (output 1)");
  if (args.has_output(2)) cpu::check_stats(args, args.output(2), v, "InvStdDev (output 2)");
  const auto epsilon = static_cast<float>(args.attributes().get_float("epsilon", 1e-5));
  return make_kernel([&context, v, epsilon, bias, px = x.as<const float>(),
                      scale = args.input(1).as<const float>(), py = y.as<float>(),
                      mean = optional_output(args, 1),
                      inv = optional_output(args, 2)](const StepContext&) {
    launch_layer_norm(v.rows, v.n, epsilon, px, scale, bias, py, mean, inv, context.stream());
  });
}

// piper.LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev) -> dX, dScale, dBias (optional).
std::unique_ptr<PreparedKernel> layer_norm_grad_factory(const KernelArgs& args,
                                                        CudaContext& context) {
  args.expect_inputs(5, 5);
  args.expect_outputs(1, 3);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(x, plan::FLOAT32, "X (input 1)");
  args.expect_same_shape(dy, "dY (input 0)", x, "X (input 1)");
  const cpu::LayerNormRows v = cpu::layer_norm_rows(args, x);
  cpu::check_affine(args, x, v, args.input(2), "Scale (input 2)");
  cpu::check_stats(args, args.input(3), v, "Mean (input 3)");
  cpu::check_stats(args, args.input(4), v, "InvStdDev (input 4)");
  if (args.has_output(0)) {
    args.expect_dtype(args.output(0), plan::FLOAT32, "dX (output 0)");
    args.expect_same_shape(args.output(0), "dX (output 0)", x, "X (input 1)");
  }
  if (args.has_output(1)) cpu::check_affine(args, x, v, args.output(1), "dScale (output 1)");
  if (args.has_output(2)) cpu::check_affine(args, x, v, args.output(2), "dBias (output 2)");
  const int chunks = reduce_chunks(v.n, v.rows);
  const bool columns = args.has_output(1) || args.has_output(2);
  const std::shared_ptr<double> partials =
      device_array<double>(chunks > 1 && columns ? static_cast<size_t>(2 * chunks * v.n) : 0);
  return make_kernel([&context, v, chunks, partials, pdy = dy.as<const float>(),
                      px = x.as<const float>(), scale = args.input(2).as<const float>(),
                      mean = args.input(3).as<const float>(), inv = args.input(4).as<const float>(),
                      dx = optional_output(args, 0), dscale = optional_output(args, 1),
                      dbias = optional_output(args, 2)](const StepContext&) {
    launch_layer_norm_grad(v.rows, v.n, pdy, px, scale, mean, inv, dx, dscale, dbias, chunks,
                           partials.get(), context.stream());
  });
}

}  // namespace

void register_normalization_kernels(CudaKernelTable& table) {
  table["Softmax"] = softmax_factory<false>;
  table["LogSoftmax"] = softmax_factory<true>;
  table["LayerNormalization"] = layer_norm_factory;
  table["piper.SoftmaxGrad"] = softmax_grad_factory<false>;
  table["piper.LogSoftmaxGrad"] = softmax_grad_factory<true>;
  table["piper.LayerNormalizationGrad"] = layer_norm_grad_factory;
}

}  // namespace piper::engine::cuda
