// Elementwise math: ONNX Pow, Sqrt, Reciprocal, Exp, Log, Erf, Max, Min (n-ary, numpy
// broadcasting) and their gradients piper.PowBaseGrad, piper.PowExponentGrad,
// piper.SqrtGrad, piper.ReciprocalGrad, piper.ErfGrad, piper.MaxMinGrad.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/cpu/elementwise_map.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/nary_fold.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/power_math.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cpu/vector_math.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// A loop over y's shape: operand 0 is y (contiguous), operand k + 1 reads inputs[k]
// broadcast to y.
StridedLoop broadcast_loop(const TensorView& y, const std::vector<TensorView>& inputs) {
  std::vector<std::vector<int64_t>> strides = {contiguous_strides(y.shape)};
  for (const TensorView& x : inputs) strides.push_back(broadcast_strides(x.shape, y.shape));
  return StridedLoop(y.shape, strides);
}

// out[i] = f(a[i], b[i], c[i]) with a, b, c broadcast to out (loop operands out, a, b, c).
template <typename A, typename B, typename C, typename F>
void ternary_rows(const StridedLoop& loop, float* out, const A* a, const B* b, const C* c, F f) {
  const int64_t sa = loop.inner_stride(1);
  const int64_t sb = loop.inner_stride(2);
  const int64_t sc = loop.inner_stride(3);
  loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
    float* y = out + offsets[0];
    const A* pa = a + offsets[1];
    const B* pb = b + offsets[2];
    const C* pc = c + offsets[3];
    if (sa == 1 && sb == 1 && sc == 1) {
      for (int64_t i = 0; i < n; ++i) y[i] = f(pa[i], pb[i], pc[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = f(pa[i * sa], pb[i * sb], pc[i * sc]);
    }
  });
}

// Pow: Y = A ^ B with A and B each float32 or int64; Y has A's dtype (an int64 base with a
// float exponent truncates the power toward zero). A float32 base with a scalar exponent of
// 1, 2 or 3 takes a fast path (copy, x·x, x·x·x).
template <typename T, typename E>
std::unique_ptr<PreparedKernel> make_pow(const TensorView& a, const TensorView& b,
                                         const TensorView& y) {
  const StridedLoop loop = broadcast_loop(y, {a, b});
  const bool scalar_exponent = b.elements() == 1 && a.shape == y.shape;
  return make_kernel([loop, scalar_exponent, n = y.elements(), pa = a.as<const T>(),
                      pb = b.as<const E>(), py = y.as<T>()](const StepContext&) {
    if (scalar_exponent) {
      if constexpr (std::is_floating_point_v<T>) {
        const float e = static_cast<float>(pb[0]);
        parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
          if (e == 2.0f) {
            for (int64_t i = begin; i < end; ++i) py[i] = pa[i] * pa[i];
          } else if (e == 3.0f) {
            for (int64_t i = begin; i < end; ++i) py[i] = pa[i] * pa[i] * pa[i];
          } else if (e == 1.0f) {
            for (int64_t i = begin; i < end; ++i) py[i] = pa[i];
          } else {
            for (int64_t i = begin; i < end; ++i) py[i] = std::pow(pa[i], e);
          }
        });
        return;
      }
    }
    const int64_t sa = loop.inner_stride(1);
    const int64_t sb = loop.inner_stride(2);
    loop.parallel_for_each_row([&](const int64_t* offsets, int64_t count) {
      T* out = py + offsets[0];
      const T* x = pa + offsets[1];
      const E* e = pb + offsets[2];
      for (int64_t i = 0; i < count; ++i) out[i] = power(x[i * sa], e[i * sb]);
    });
  });
}

std::unique_ptr<PreparedKernel> pow_factory(const KernelArgs& args) {
  check_pow(args);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  if (a.dtype == plan::INT64) {
    if (b.dtype == plan::FLOAT32) return make_pow<int64_t, float>(a, b, y);
    return make_pow<int64_t, int64_t>(a, b, y);
  }
  if (b.dtype == plan::INT64) return make_pow<float, int64_t>(a, b, y);
  return make_pow<float, float>(a, b, y);
}

// Float32 dX of Y's (broadcast) shape from dY of that shape and two broadcast inputs.
template <typename E, typename F>
std::unique_ptr<PreparedKernel> make_pow_grad(const KernelArgs& args, F f) {
  const TensorView& dy = args.input(0);
  const TensorView& a = args.input(1);
  const TensorView& b = args.input(2);
  const TensorView& dx = args.output(0);
  const StridedLoop loop = broadcast_loop(dx, {dy, a, b});
  return make_kernel(
      [loop, f, pdy = dy.as<const float>(), pa = a.as<const float>(), pb = b.as<const E>(),
       pdx = dx.as<float>()](const StepContext&) { ternary_rows(loop, pdx, pdy, pa, pb, f); });
}

// piper.PowBaseGrad(dY, A, B).
std::unique_ptr<PreparedKernel> pow_base_grad_factory(const KernelArgs& args) {
  check_pow_grad(args, true);
  const auto f = [](float dy, float a, auto b) {
    return pow_base_grad(dy, a, static_cast<float>(b));
  };
  if (args.input(2).dtype == plan::INT64) return make_pow_grad<int64_t>(args, f);
  return make_pow_grad<float>(args, f);
}

// piper.PowExponentGrad(dY, A, Y).
std::unique_ptr<PreparedKernel> pow_exponent_grad_factory(const KernelArgs& args) {
  check_pow_grad(args, false);
  return make_pow_grad<float>(
      args, [](float dy, float a, float y) { return pow_exponent_grad(dy, a, y); });
}

// Max and Min: y = the largest (smallest) of the inputs broadcast to y; float32 or int64.
// NaN propagates, as in PyTorch's maximum/minimum.
template <bool kMax>
struct ExtremumFold {
  template <typename T>
  T operator()(T current, T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x)) return x;
    }
    return (kMax ? x > current : x < current) ? x : current;
  }
};

// piper.MaxMinGrad(dY, Y, X0, X1, ...), attribute `input` = i: dY · [Xi = Y] / #{j : Xj = Y}
// in Y's shape.
std::unique_ptr<PreparedKernel> max_min_grad_factory(const KernelArgs& args) {
  const int64_t which = check_max_min_grad(args);
  const TensorView& dy = args.input(0);
  const TensorView& y = args.input(1);
  const TensorView& dx = args.output(0);
  std::vector<StridedLoop> loops;
  std::vector<const float*> xs;
  for (size_t k = 2; k < args.num_inputs(); ++k) {
    loops.push_back(broadcast_loop(y, {args.input(k)}));
    xs.push_back(args.input(k).as<const float>());
  }
  std::vector<float> ties(static_cast<size_t>(y.elements()));
  return make_kernel([loops, xs, ties, which, pdy = dy.as<const float>(), py = y.as<const float>(),
                      pdx = dx.as<float>()](const StepContext&) mutable {
    std::fill(ties.begin(), ties.end(), 0.0f);
    for (size_t k = 0; k < loops.size(); ++k) {
      const int64_t s = loops[k].inner_stride(1);
      loops[k].parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
        float* count = ties.data() + offsets[0];
        const float* out = py + offsets[0];
        const float* in = xs[k] + offsets[1];
        for (int64_t i = 0; i < n; ++i) count[i] += in[i * s] == out[i] ? 1.0f : 0.0f;
      });
    }
    const StridedLoop& loop = loops[static_cast<size_t>(which)];
    const int64_t s = loop.inner_stride(1);
    loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
      const int64_t o = offsets[0];
      const float* in = xs[static_cast<size_t>(which)] + offsets[1];
      for (int64_t i = 0; i < n; ++i) {
        pdx[o + i] = in[i * s] == py[o + i] ? pdy[o + i] / ties[o + i] : 0.0f;
      }
    });
  });
}

// dX = dY · 2/√π · e^(−X²) for n elements, e^(−X²) by exp_n a chunk at a time.
void erf_grad_n(const float* dy, const float* x, float* dx, int64_t n) {
  constexpr float kTwoOverSqrtPi = 2.0f * std::numbers::inv_sqrtpi_v<float>;
  constexpr int64_t kChunk = 256;
  float e[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t count = std::min(kChunk, n - i);
    for (int64_t j = 0; j < count; ++j) e[j] = -(x[i + j] * x[i + j]);
    exp_n(e, e, count);
    for (int64_t j = 0; j < count; ++j) dx[i + j] = dy[i + j] * kTwoOverSqrtPi * e[j];
  }
}

}  // namespace

void check_pow(const KernelArgs& args) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  args.expect_broadcast({a, b}, args.output(0));
  args.expect_dtype(args.output(0), a.dtype, "output 0 (the base's dtype)");
  if (a.dtype == plan::INT64) {
    if (b.dtype != plan::FLOAT32) {
      args.expect_dtype(b, plan::INT64, "exponent (input 1) of an int64 base");
    }
    return;
  }
  args.expect_dtype(a, plan::FLOAT32, "base (input 0)");
  if (b.dtype != plan::INT64) args.expect_dtype(b, plan::FLOAT32, "exponent (input 1)");
}

void check_pow_grad(const KernelArgs& args, bool base) {
  args.expect_inputs(3, 3);
  args.expect_outputs(1, 1);
  const TensorView& dx = args.output(0);
  args.expect_dtype(dx, plan::FLOAT32, "output 0");
  args.expect_dtype(args.input(0), plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(args.input(1), plan::FLOAT32, "A (input 1)");
  args.expect_same_shape(args.input(0), "dY (input 0)", dx, "output 0");
  args.expect_broadcast({args.input(0), args.input(1), args.input(2)}, dx);
  if (!base) {
    args.expect_dtype(args.input(2), plan::FLOAT32, "Y (input 2)");
  } else if (args.input(2).dtype != plan::INT64) {
    args.expect_dtype(args.input(2), plan::FLOAT32, "B (input 2)");
  }
}

int64_t check_max_min_grad(const KernelArgs& args) {
  if (args.num_inputs() < 3) {
    args.fail("takes dY, Y and at least one forward input, the plan gives " +
              std::to_string(args.num_inputs()) + " inputs");
  }
  args.expect_outputs(1, 1);
  const TensorView& dy = args.input(0);
  const TensorView& y = args.input(1);
  const TensorView& dx = args.output(0);
  args.expect_same_shape(dy, "dY (input 0)", dx, "output 0");
  args.expect_same_shape(y, "Y (input 1)", dx, "output 0");
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(y, plan::FLOAT32, "Y (input 1)");
  args.expect_dtype(dx, plan::FLOAT32, "output 0");
  const size_t forward_inputs = args.num_inputs() - 2;
  const int64_t which = args.attributes().require_int("input");
  if (which < 0 || which >= static_cast<int64_t>(forward_inputs)) {
    args.fail("attribute input = " + std::to_string(which) + " names none of the " +
              std::to_string(forward_inputs) + " forward inputs");
  }
  for (size_t k = 0; k < forward_inputs; ++k) {
    const TensorView& x = args.input(k + 2);
    args.expect_dtype(x, plan::FLOAT32, "X" + std::to_string(k));
    if (!broadcasts_to(x.shape, y.shape)) {
      args.fail("X" + std::to_string(k) + " " + shape_string(x.shape) +
                " does not broadcast to Y " + shape_string(y.shape));
    }
  }
  return which;
}

void register_math_kernels(KernelTable& table) {
  table["Pow"] = pow_factory;
  table["Sqrt"] = unary_factory<false>([](float x) { return std::sqrt(x); });
  table["Reciprocal"] = unary_factory<false>([](float x) { return 1.0f / x; });
  table["Exp"] = range_unary_factory(exp_n);
  table["Log"] = unary_factory<false>([](float x) { return std::log(x); });
  table["Erf"] = range_unary_factory(erf_n);
  table["Max"] = nary_fold_factory<ExtremumFold<true>>;
  table["Min"] = nary_fold_factory<ExtremumFold<false>>;
  table["piper.PowBaseGrad"] = pow_base_grad_factory;
  table["piper.PowExponentGrad"] = pow_exponent_grad_factory;
  table["piper.SqrtGrad"] =
      saved_grad_factory([](float dy, float y) { return dy * 0.5f / y; }, "Y");
  table["piper.ReciprocalGrad"] =
      saved_grad_factory([](float dy, float y) { return -dy * y * y; }, "Y");
  table["piper.ErfGrad"] = saved_grad_range_factory(erf_grad_n, "X");
  table["piper.MaxMinGrad"] = max_min_grad_factory;
}

}  // namespace piper::engine::cpu
