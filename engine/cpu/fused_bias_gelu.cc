// piper.BiasGelu(X[, Bias]) → Y and piper.BiasGeluGrad(dY, X[, Bias]) → dX[, dBias]
// (docs/plan-format.md): Y = GELU(X + Bias), Bias over X's last dimension, with attribute
// `approximate` "none" (erf) or "tanh". The arithmetic follows the op order PyTorch exports
// at opset 17, so the fused forward rounds as the unfused ops do.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/cpu/bias_gelu_operands.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/parallel.h"

namespace piper::engine::cpu {
namespace {

constexpr float kSqrt2 = 1.41421356237f;
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2Pi = 0.3989422804f;  // 1 / √(2π)

template <GeluApproximation kA>
float gelu(float h) {
  if constexpr (kA == GeluApproximation::kErf) {
    return (h * (1.0f + std::erf(h / kSqrt2))) * 0.5f;
  } else {
    return 0.5f * (h * (1.0f + std::tanh(kSqrt2OverPi * (h + kCubic * (h * (h * h))))));
  }
}

template <GeluApproximation kA>
float gelu_derivative(float h) {
  if constexpr (kA == GeluApproximation::kErf) {
    return 0.5f * (1.0f + std::erf(h / kSqrt2)) + h * kInvSqrt2Pi * std::exp(-0.5f * h * h);
  } else {
    const float t = std::tanh(kSqrt2OverPi * (h + kCubic * h * h * h));
    return 0.5f * (1.0f + t) +
           0.5f * h * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * h * h);
  }
}

// X viewed as [rows, n], n its last dimension (the bias length), cut into blocks of
// `block_rows` rows: the parallel tasks, and the partial sums of dBias, which are added in
// block order so that dBias does not depend on the thread count.
struct GeluView {
  int64_t rows = 1, n = 1;
  int64_t block_rows = 1, blocks = 0;
  GeluApproximation approximation = GeluApproximation::kErf;
};

GeluView gelu_view(const KernelArgs& args, const TensorView& x, size_t bias_input) {
  GeluView view;
  view.approximation = check_bias_gelu(args, x, bias_input);
  view.n = x.rank() == 0 ? 1 : x.shape.back();
  view.rows = view.n == 0 ? 0 : x.elements() / view.n;
  view.block_rows = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, view.n));
  view.blocks = (view.rows + view.block_rows - 1) / view.block_rows;
  return view;
}

// Runs body(first_row, end_row, block) for every block of rows on parallel.h's pool.
template <typename Body>
void for_each_block(const GeluView& v, const Body& body) {
  parallel_for(v.blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      body(block * v.block_rows, std::min(v.rows, (block + 1) * v.block_rows), block);
    }
  });
}

template <GeluApproximation kA>
void gelu_forward(const GeluView& v, const float* x, const float* bias, float* y) {
  for_each_block(v, [&](int64_t first, int64_t end, int64_t) {
    for (int64_t r = first; r < end; ++r) {
      const float* in = x + r * v.n;
      float* out = y + r * v.n;
      for (int64_t i = 0; i < v.n; ++i) out[i] = gelu<kA>(bias ? in[i] + bias[i] : in[i]);
    }
  });
}

// dX = dY · GELU'(X + Bias); dBias = Σ_rows dX, through `partial` (blocks × n). Either output
// may be null.
template <GeluApproximation kA>
void gelu_backward(const GeluView& v, const float* dy, const float* x, const float* bias, float* dx,
                   float* dbias, float* partial) {
  for_each_block(v, [&](int64_t first, int64_t end, int64_t block) {
    float* sum = dbias != nullptr ? partial + block * v.n : nullptr;
    if (sum != nullptr) std::fill(sum, sum + v.n, 0.0f);
    for (int64_t r = first; r < end; ++r) {
      const float* in = x + r * v.n;
      const float* g = dy + r * v.n;
      for (int64_t i = 0; i < v.n; ++i) {
        const float grad = g[i] * gelu_derivative<kA>(bias ? in[i] + bias[i] : in[i]);
        if (dx != nullptr) dx[r * v.n + i] = grad;
        if (sum != nullptr) sum[i] += grad;
      }
    }
  });
  if (dbias == nullptr) return;
  std::fill(dbias, dbias + v.n, 0.0f);
  for (int64_t block = 0; block < v.blocks; ++block) {
    for (int64_t i = 0; i < v.n; ++i) dbias[i] += partial[block * v.n + i];
  }
}

std::unique_ptr<PreparedKernel> bias_gelu_factory(const KernelArgs& args) {
  args.expect_inputs(1, 2);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const GeluView v = gelu_view(args, x, 1);
  args.expect_dtype(args.output(0), plan::FLOAT32, "Y (output 0)");
  args.expect_same_shape(x, "X (input 0)", args.output(0), "Y (output 0)");
  const auto run = v.approximation == GeluApproximation::kTanh
                       ? gelu_forward<GeluApproximation::kTanh>
                       : gelu_forward<GeluApproximation::kErf>;
  return make_kernel(
      [v, run, px = x.as<const float>(),
       bias = args.has_input(1) ? args.input(1).as<const float>() : nullptr,
       py = args.output(0).as<float>()](const StepContext&) { run(v, px, bias, py); });
}

std::unique_ptr<PreparedKernel> bias_gelu_grad_factory(const KernelArgs& args) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 2);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
  const GeluView v = gelu_view(args, x, 2);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_same_shape(dy, "dY (input 0)", x, "X (input 1)");
  float* dx = args.gradient_output(0, 1);
  float* dbias = args.gradient_output(1, 2);
  const auto run = v.approximation == GeluApproximation::kTanh
                       ? gelu_backward<GeluApproximation::kTanh>
                       : gelu_backward<GeluApproximation::kErf>;
  std::vector<float> partial(dbias != nullptr ? static_cast<size_t>(v.blocks * v.n) : 0);
  return make_kernel(
      [v, run, dx, dbias, partial, pdy = dy.as<const float>(), px = x.as<const float>(),
       bias = args.has_input(2) ? args.input(2).as<const float>() : nullptr](
          const StepContext&) mutable { run(v, pdy, px, bias, dx, dbias, partial.data()); });
}

}  // namespace

void register_fused_bias_gelu_kernels(KernelTable& table) {
  table["piper.BiasGelu"] = bias_gelu_factory;
  table["piper.BiasGeluGrad"] = bias_gelu_grad_factory;
}

}  // namespace piper::engine::cpu
