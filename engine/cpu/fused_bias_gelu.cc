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
#include "engine/cpu/split_invariant_sum.h"
#include "engine/cpu/vector_math.h"

namespace piper::engine::cpu {
namespace {

constexpr float kSqrt2 = 1.41421356237f;
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2Pi = 0.3989422804f;  // 1 / √(2π)

// Elements a row is processed in at a time: the erf and exp arguments go through stack
// buffers of this size, so that vector_math.h's erf_n and exp_n run over whole arrays.
constexpr int64_t kChunk = 256;

// y[i] = GELU(h[i]) for i in [0, n), n <= kChunk. The erf form rounds as the unfused ops
// Div → Erf (erf_n) → Add → Mul → Mul do.
template <GeluApproximation kA>
void gelu_chunk(const float* h, float* y, int64_t n) {
  if constexpr (kA == GeluApproximation::kErf) {
    float e[kChunk];
    for (int64_t i = 0; i < n; ++i) e[i] = h[i] / kSqrt2;
    erf_n(e, e, n);
    for (int64_t i = 0; i < n; ++i) y[i] = (h[i] * (1.0f + e[i])) * 0.5f;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float x = h[i];
      y[i] = 0.5f * (x * (1.0f + std::tanh(kSqrt2OverPi * (x + kCubic * (x * (x * x))))));
    }
  }
}

// d[i] = GELU'(h[i]) for i in [0, n), n <= kChunk.
template <GeluApproximation kA>
void gelu_derivative_chunk(const float* h, float* d, int64_t n) {
  if constexpr (kA == GeluApproximation::kErf) {
    float e[kChunk], g[kChunk];
    for (int64_t i = 0; i < n; ++i) {
      e[i] = h[i] / kSqrt2;
      g[i] = -0.5f * h[i] * h[i];
    }
    erf_n(e, e, n);
    exp_n(g, g, n);
    for (int64_t i = 0; i < n; ++i) d[i] = 0.5f * (1.0f + e[i]) + h[i] * kInvSqrt2Pi * g[i];
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float x = h[i];
      const float t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
      d[i] = 0.5f * (1.0f + t) +
             0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    }
  }
}

// h[i] = x[i] + bias[i] (x[i] without a bias) for i in [0, n).
void add_bias(const float* x, const float* bias, float* h, int64_t n) {
  if (bias == nullptr) {
    std::copy(x, x + n, h);
  } else {
    for (int64_t i = 0; i < n; ++i) h[i] = x[i] + bias[i];
  }
}

// X viewed as [rows, n], n its last dimension (the bias length), cut into blocks of
// `block_rows` rows: the parallel tasks.
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
    float h[kChunk];
    for (int64_t r = first; r < end; ++r) {
      for (int64_t i = 0; i < v.n; i += kChunk) {
        const int64_t count = std::min(kChunk, v.n - i);
        add_bias(x + r * v.n + i, bias != nullptr ? bias + i : nullptr, h, count);
        gelu_chunk<kA>(h, y + r * v.n + i, count);
      }
    }
  });
}

// dX = dY · GELU'(X + Bias) into `grad` (dX's buffer, or scratch of X's size when only dBias is
// wanted); dBias = Σ_rows dX in the split-invariant order (split_invariant_sum.h), so that
// replicas' halves of the rows added by the all-reduce give one process's sum. dbias may be
// null.
template <GeluApproximation kA>
void gelu_backward(const GeluView& v, const float* dy, const float* x, const float* bias,
                   float* grad, float* dbias) {
  for_each_block(v, [&](int64_t first, int64_t end, int64_t) {
    float h[kChunk], d[kChunk];
    for (int64_t r = first; r < end; ++r) {
      for (int64_t i = 0; i < v.n; i += kChunk) {
        const int64_t count = std::min(kChunk, v.n - i);
        add_bias(x + r * v.n + i, bias != nullptr ? bias + i : nullptr, h, count);
        gelu_derivative_chunk<kA>(h, d, count);
        const float* g = dy + r * v.n + i;
        for (int64_t j = 0; j < count; ++j) d[j] *= g[j];
        std::copy(d, d + count, grad + r * v.n + i);  // after reading dY, which dX may share
      }
    }
  });
  if (dbias == nullptr) return;
  parallel_split_invariant_sums(v.rows, v.n, dbias,
                                [&](int64_t r, int64_t first, int64_t last, float* acc) {
                                  const float* d = grad + r * v.n;
                                  for (int64_t i = first; i < last; ++i) acc[i - first] += d[i];
                                });
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
  // Without dX, the gradient that dBias sums goes to scratch.
  std::vector<float> scratch(dx == nullptr && dbias != nullptr ? static_cast<size_t>(v.rows * v.n)
                                                               : 0);
  return make_kernel([v, run, dx, dbias, scratch, pdy = dy.as<const float>(),
                      px = x.as<const float>(),
                      bias = args.has_input(2) ? args.input(2).as<const float>()
                                               : nullptr](const StepContext&) mutable {
    if (dx == nullptr && dbias == nullptr) return;
    run(v, pdy, px, bias, dx != nullptr ? dx : scratch.data(), dbias);
  });
}

}  // namespace

void gelu_tanh_n(const float* x, float* y, int64_t count) {
  parallel_for(count, kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += kChunk) {
      gelu_chunk<GeluApproximation::kTanh>(x + i, y + i, std::min(kChunk, end - i));
    }
  });
}

void register_fused_bias_gelu_kernels(KernelTable& table) {
  table["piper.BiasGelu"] = bias_gelu_factory;
  table["piper.BiasGeluGrad"] = bias_gelu_grad_factory;
}

}  // namespace piper::engine::cpu
