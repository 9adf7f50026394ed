// Variadic element-wise folds (ONNX Sum, Max, Min, Mean): y = combine(...combine(x0, x1)...,
// xn) with every input broadcast to y, optionally scaled (Mean); float32 or int64.
#pragma once

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/strided_loop.h"

namespace piper::engine::cpu {

// `Combine` is a functor with `template <typename T> T operator()(T accumulated, T x)`. One
// pass over y: every input is an operand of one loop. The fold is multiplied by `scale` unless
// it is 1.
template <typename T, typename Combine>
std::unique_ptr<PreparedKernel> make_nary_fold(const KernelArgs& args, T scale) {
  const TensorView& y = args.output(0);
  std::vector<std::vector<int64_t>> strides = {contiguous_strides(y.shape)};
  std::vector<const T*> inputs;
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    strides.push_back(broadcast_strides(args.input(i).shape, y.shape));
    inputs.push_back(args.input(i).as<const T>());
  }
  const StridedLoop loop(y.shape, strides);
  return make_kernel([loop, inputs, scale, py = y.as<T>()](const StepContext&) {
    loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
      T* out = py + offsets[0];
      for (size_t k = 0; k < inputs.size(); ++k) {
        const T* in = inputs[k] + offsets[k + 1];
        const int64_t s = loop.inner_stride(k + 1);
        if (k == 0) {
          for (int64_t i = 0; i < n; ++i) out[i] = in[i * s];
        } else if (s == 1) {
          for (int64_t i = 0; i < n; ++i) out[i] = Combine{}(out[i], in[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) out[i] = Combine{}(out[i], in[i * s]);
        }
      }
      if (scale != T(1)) {
        for (int64_t i = 0; i < n; ++i) out[i] *= scale;
      }
    });
  });
}

// Checks one or more inputs of the output's dtype broadcasting to it, then prepares the fold
// (float32 folds scaled by `scale`).
template <typename Combine>
std::unique_ptr<PreparedKernel> prepare_nary_fold(const KernelArgs& args, float scale) {
  if (args.num_inputs() < 1) args.fail("takes at least one input, the plan gives none");
  args.expect_outputs(1, 1);
  std::vector<TensorView> inputs;
  const TensorView& y = args.output(0);
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    inputs.push_back(args.input(i));
    args.expect_dtype(inputs[i], y.dtype, "input " + std::to_string(i));
  }
  args.expect_broadcast(inputs, y);
  if (y.dtype == plan::INT64 && scale == 1.0f) return make_nary_fold<int64_t, Combine>(args, 1);
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  return make_nary_fold<float, Combine>(args, scale);
}

template <typename Combine>
std::unique_ptr<PreparedKernel> nary_fold_factory(const KernelArgs& args) {
  return prepare_nary_fold<Combine>(args, 1.0f);
}

}  // namespace piper::engine::cpu
