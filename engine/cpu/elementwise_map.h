// Same-shape elementwise kernels spread over parallel.h's threads: unary maps y[i] = f(x[i])
// and gradients dX[i] = f(dY[i], S[i]) of a saved tensor S (elementwise.cc, math.cc), element by
// element or range by range (for vector_math.h's array functions).
#pragma once

#include <string>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/parallel.h"

namespace piper::engine::cpu {

// y[i] = f(x[i]) for tensors of n elements of type T.
template <typename T, typename F>
std::unique_ptr<PreparedKernel> make_map(const TensorView& x, const TensorView& y, F f) {
  return make_kernel(
      [f, n = y.elements(), px = x.as<const T>(), py = y.as<T>()](const StepContext&) {
        parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) py[i] = f(px[i]);
        });
      });
}

// Checks one input and one output of the same shape and dtype.
inline void check_unary(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  args.expect_same_shape(args.input(0), "input 0", args.output(0), "output 0");
  args.expect_dtype(args.input(0), args.output(0).dtype, "input 0");
}

// A same-shape float32 map y[i] = f(x[i]); with kAllowInt64 also for int64 tensors.
template <bool kAllowInt64, typename F>
KernelFactory unary_factory(F f) {
  return [f](const KernelArgs& args) -> std::unique_ptr<PreparedKernel> {
    check_unary(args);
    const TensorView& x = args.input(0);
    const TensorView& y = args.output(0);
    if constexpr (kAllowInt64) {
      if (y.dtype == plan::INT64) return make_map<int64_t>(x, y, f);
    }
    args.expect_dtype(y, plan::FLOAT32, "output 0");
    return make_map<float>(x, y, f);
  };
}

// A same-shape float32 map computed range by range: fn(x, y, n) writes y[0, n) from x[0, n).
inline KernelFactory range_unary_factory(void (*fn)(const float*, float*, int64_t)) {
  return [fn](const KernelArgs& args) -> std::unique_ptr<PreparedKernel> {
    check_unary(args);
    args.expect_dtype(args.output(0), plan::FLOAT32, "output 0");
    return make_kernel([fn, n = args.output(0).elements(), px = args.input(0).as<const float>(),
                        py = args.output(0).as<float>()](const StepContext&) {
      parallel_for(n, kParallelGrain,
                   [&](int64_t begin, int64_t end) { fn(px + begin, py + begin, end - begin); });
    });
  };
}

// dX = f(dY, S) range by range with a saved float32 tensor S (the forward op's output or input,
// named `saved` in errors), all three of one shape: range(dy, s, dx, n) writes dx[0, n).
template <typename Range>
KernelFactory saved_grad_range_factory(Range range, const char* saved) {
  return [range, saved](const KernelArgs& args) -> std::unique_ptr<PreparedKernel> {
    args.expect_saved_grad(saved);
    const TensorView& dy = args.input(0);
    const TensorView& s = args.input(1);
    const TensorView& dx = args.output(0);
    return make_kernel([range, n = dx.elements(), pdy = dy.as<const float>(),
                        ps = s.as<const float>(), pdx = dx.as<float>()](const StepContext&) {
      parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
        range(pdy + begin, ps + begin, pdx + begin, end - begin);
      });
    });
  };
}

// dX[i] = f(dY[i], S[i]) with a saved float32 tensor S, as saved_grad_range_factory.
template <typename F>
KernelFactory saved_grad_factory(F f, const char* saved) {
  return saved_grad_range_factory(
      [f](const float* dy, const float* s, float* dx, int64_t n) {
        for (int64_t i = 0; i < n; ++i) dx[i] = f(dy[i], s[i]);
      },
      saved);
}

}  // namespace piper::engine::cpu
