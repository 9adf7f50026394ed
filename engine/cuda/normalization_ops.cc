// Row-wise normalizations on CUDA: Softmax, LogSoftmax, LayerNormalization and their
// gradients piper.SoftmaxGrad, piper.LogSoftmaxGrad, piper.LayerNormalizationGrad.
// Checks follow engine/cpu/normalization.cc.
#include "engine/cpu/layer_norm_geometry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cuda/normalization.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

AxisRows axis_rows(const cpu::AxisLines& lines) { return {lines.outer, lines.n, lines.inner}; }

template <bool kLog>
std::unique_ptr<PreparedKernel> softmax_factory(const KernelArgs& args, CudaContext& context) {
  const AxisRows rows = axis_rows(cpu::check_along_axis(args));
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  return make_kernel(
      [&context, rows, px = x.as<const float>(), py = y.as<float>()](const StepContext&) {
        launch_softmax(kLog, rows, px, py, context.stream());
      });
}

template <bool kLog>
std::unique_ptr<PreparedKernel> softmax_grad_factory(const KernelArgs& args, CudaContext& context) {
  const AxisRows rows = axis_rows(cpu::check_softmax_grad(args));
  const TensorView& dy = args.input(0);
  const TensorView& y = args.input(1);
  const TensorView& dx = args.output(0);
  return make_kernel([&context, rows, pdy = dy.as<const float>(), py = y.as<const float>(),
                      pdx = dx.as<float>()](const StepContext&) {
    launch_softmax_grad(kLog, rows, pdy, py, pdx, context.stream());
  });
}

float* optional_output(const KernelArgs& args, size_t i) {
  return args.has_output(i) ? args.output(i).as<float>() : nullptr;
}

std::unique_ptr<PreparedKernel> layer_norm_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::LayerNormRows v = cpu::check_layer_norm(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const float* bias = args.has_input(2) ? args.input(2).as<const float>() : nullptr;
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
  const cpu::LayerNormRows v = cpu::check_layer_norm_grad(args);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
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
