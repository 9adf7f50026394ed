// Row-wise normalizations: ONNX Softmax, LogSoftmax (opset 13+: along one axis) and
// LayerNormalization (opset 17), and their gradients piper.SoftmaxGrad,
// piper.LogSoftmaxGrad and piper.LayerNormalizationGrad.
#include <algorithm>
#include <array>
#include <cmath>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/layer_norm_geometry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/row_reductions.h"
#include "engine/cpu/split_invariant_sum.h"
#include "engine/cpu/vector_math.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// Exponentials go through buffers of this many floats where a row must keep its values.
constexpr int64_t kExpChunk = 256;

// Softmax or LogSoftmax of one row of n elements; y may be x.
template <bool kLog>
void softmax_row(const float* x, float* y, int64_t n) {
  const float m = row_maximum(x, n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - m;
  if (kLog) {
    float exps[kExpChunk];
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i += kExpChunk) {
      const int64_t count = std::min(kExpChunk, n - i);
      exp_n(y + i, exps, count);
      sum += row_sum(exps, count);
    }
    const float log_sum = std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i] -= log_sum;
  } else {
    exp_n(y, y, n);
    const float scale = 1.0f / row_sum(y, n);
    for (int64_t i = 0; i < n; ++i) y[i] *= scale;
  }
}

// Runs row(in..., out) over every [outer, n, inner] row of the operands, rows spread over
// parallel.h's threads; strided rows (inner > 1) are gathered into scratch and the result
// scattered back.
template <size_t kIn, typename Row>
void for_each_axis_row(const AxisLines& v, const std::array<const float*, kIn>& in, float* out,
                       Row row) {
  const int64_t grain = (kParallelGrain + v.n - 1) / v.n;
  if (v.inner == 1) {
    parallel_for(v.outer, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        std::array<const float*, kIn> rows;
        for (size_t k = 0; k < kIn; ++k) rows[k] = in[k] + o * v.n;
        row(rows, out + o * v.n);
      }
    });
    return;
  }
  parallel_for(v.outer * v.inner, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(v.n * (kIn + 1)));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t base = r / v.inner * v.n * v.inner + r % v.inner;
      std::array<const float*, kIn> rows;
      for (size_t k = 0; k < kIn; ++k) {
        float* gathered = scratch.data() + k * v.n;
        for (int64_t i = 0; i < v.n; ++i) gathered[i] = in[k][base + i * v.inner];
        rows[k] = gathered;
      }
      float* result = scratch.data() + kIn * v.n;
      row(rows, result);
      for (int64_t i = 0; i < v.n; ++i) out[base + i * v.inner] = result[i];
    }
  });
}

template <bool kLog>
std::unique_ptr<PreparedKernel> softmax_factory(const KernelArgs& args) {
  const AxisLines v = check_along_axis(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  return make_kernel([v, px = x.as<const float>(), py = y.as<float>()](const StepContext&) {
    for_each_axis_row<1>(
        v, {px}, py, [&](const auto& rows, float* out) { softmax_row<kLog>(rows[0], out, v.n); });
  });
}

// piper.SoftmaxGrad(dY, Y): dX = Y · (dY − Σ dY·Y); piper.LogSoftmaxGrad(dY, Y):
// dX = dY − exp(Y) · Σ dY; sums along `axis`.
template <bool kLog>
std::unique_ptr<PreparedKernel> softmax_grad_factory(const KernelArgs& args) {
  const AxisLines v = check_softmax_grad(args);
  const TensorView& dy = args.input(0);
  const TensorView& y = args.input(1);
  const TensorView& dx = args.output(0);
  return make_kernel([v, pdy = dy.as<const float>(), py = y.as<const float>(),
                      pdx = dx.as<float>()](const StepContext&) {
    for_each_axis_row<2>(v, {pdy, py}, pdx, [&](const auto& rows, float* out) {
      const float* g = rows[0];
      const float* s = rows[1];
      if (kLog) {
        const float sum = row_sum(g, v.n);
        float exps[kExpChunk];
        for (int64_t i = 0; i < v.n; i += kExpChunk) {
          const int64_t count = std::min(kExpChunk, v.n - i);
          exp_n(s + i, exps, count);
          for (int64_t j = 0; j < count; ++j) out[i + j] = g[i + j] - exps[j] * sum;
        }
      } else {
        const float dot = row_dot(g, s, v.n);
        for (int64_t i = 0; i < v.n; ++i) out[i] = s[i] * (g[i] - dot);
      }
    });
  });
}

std::unique_ptr<PreparedKernel> layer_norm_factory(const KernelArgs& args) {
  const LayerNormRows v = check_layer_norm(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const float* bias = args.has_input(2) ? args.input(2).as<const float>() : nullptr;
  float* mean_out = args.has_output(1) ? args.output(1).as<float>() : nullptr;
  float* inv_out = args.has_output(2) ? args.output(2).as<float>() : nullptr;
  const auto epsilon = static_cast<float>(args.attributes().get_float("epsilon", 1e-5));
  return make_kernel([v, epsilon, bias, mean_out, inv_out, px = x.as<const float>(),
                      scale = args.input(1).as<const float>(),
                      py = y.as<float>()](const StepContext&) {
    const int64_t n = v.n;
    const float inv_n = 1.0f / static_cast<float>(n);
    parallel_for(v.rows, (kParallelGrain + n - 1) / n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* in = px + r * n;
        float* out = py + r * n;
        const float mean = row_sum(in, n) * inv_n;
        for (int64_t i = 0; i < n; ++i) out[i] = in[i] - mean;
        const float inv = 1.0f / std::sqrt(row_dot(out, out, n) * inv_n + epsilon);
        if (bias != nullptr) {
          for (int64_t i = 0; i < n; ++i) out[i] = out[i] * inv * scale[i] + bias[i];
        } else {
          for (int64_t i = 0; i < n; ++i) out[i] = out[i] * inv * scale[i];
        }
        if (mean_out != nullptr) mean_out[r] = mean;
        if (inv_out != nullptr) inv_out[r] = inv;
      }
    });
  });
}

// piper.LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev) → dX, dScale, dBias (each
// optional). With x̂ = (X − Mean)·InvStdDev and g = dY·Scale, per row:
// dX = InvStdDev · (g − mean(g) − x̂ · mean(g·x̂)); dScale = Σ_rows dY·x̂; dBias = Σ_rows dY,
// summed in the split-invariant order (split_invariant_sum.h), so that replicas' halves of the
// rows added by the all-reduce give one process's sums.
std::unique_ptr<PreparedKernel> layer_norm_grad_factory(const KernelArgs& args) {
  const LayerNormRows v = check_layer_norm_grad(args);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
  float* dx = args.has_output(0) ? args.output(0).as<float>() : nullptr;
  float* dscale = args.has_output(1) ? args.output(1).as<float>() : nullptr;
  float* dbias = args.has_output(2) ? args.output(2).as<float>() : nullptr;
  return make_kernel([v, dx, dscale, dbias, pdy = dy.as<const float>(), px = x.as<const float>(),
                      scale = args.input(2).as<const float>(),
                      mean = args.input(3).as<const float>(),
                      inv_std = args.input(4).as<const float>()](const StepContext&) {
    const int64_t n = v.n;
    const float inv_n = 1.0f / static_cast<float>(n);
    // The sums first: dX may share dY's memory.
    if (dscale != nullptr) {
      parallel_split_invariant_sums(v.rows, n, dscale,
                                    [&](int64_t r, int64_t first, int64_t last, float* acc) {
                                      const float* d = pdy + r * n;
                                      const float* in = px + r * n;
                                      const float m = mean[r];
                                      const float inv = inv_std[r];
                                      for (int64_t i = first; i < last; ++i) {
                                        const float xhat = (in[i] - m) * inv;
                                        acc[i - first] += d[i] * xhat;
                                      }
                                    });
    }
    if (dbias != nullptr) {
      parallel_split_invariant_sums(v.rows, n, dbias,
                                    [&](int64_t r, int64_t first, int64_t last, float* acc) {
                                      const float* d = pdy + r * n;
                                      for (int64_t i = first; i < last; ++i) acc[i - first] += d[i];
                                    });
    }
    if (dx != nullptr) {
      parallel_for(v.rows, (kParallelGrain + n - 1) / std::max<int64_t>(n, 1),
                   [&](int64_t first, int64_t last) {
                     std::vector<float> scratch(static_cast<size_t>(2 * n));
                     float* xhat = scratch.data();
                     float* g = scratch.data() + n;
                     for (int64_t r = first; r < last; ++r) {
                       const float* d = pdy + r * n;
                       const float* in = px + r * n;
                       const float m = mean[r];
                       const float inv = inv_std[r];
                       for (int64_t i = 0; i < n; ++i) xhat[i] = (in[i] - m) * inv;
                       for (int64_t i = 0; i < n; ++i) g[i] = d[i] * scale[i];
                       const float mean_g = row_sum(g, n) * inv_n;
                       const float mean_gx = row_dot(g, xhat, n) * inv_n;
                       float* out = dx + r * n;
                       for (int64_t i = 0; i < n; ++i)
                         out[i] = inv * (g[i] - mean_g - xhat[i] * mean_gx);
                     }
                   });
    }
  });
}

}  // namespace

void register_normalization_kernels(KernelTable& table) {
  table["Softmax"] = softmax_factory<false>;
  table["LogSoftmax"] = softmax_factory<true>;
  table["LayerNormalization"] = layer_norm_factory;
  table["piper.SoftmaxGrad"] = softmax_grad_factory<false>;
  table["piper.LogSoftmaxGrad"] = softmax_grad_factory<true>;
  table["piper.LayerNormalizationGrad"] = layer_norm_grad_factory;
}

}  // namespace piper::engine::cpu
