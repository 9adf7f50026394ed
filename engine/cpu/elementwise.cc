// Elementwise kernels: ONNX Add, Sub, Mul, Div, Mod, PRelu, Sum, Mean (numpy broadcasting),
// Neg, Relu, Tanh, Sigmoid; Piper's ReluGrad, TanhGrad, SigmoidGrad.
#include <cmath>

#include "engine/cpu/binary_math.h"
#include "engine/cpu/elementwise_map.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/nary_fold.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cpu/vector_math.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

struct AddOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct SubOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a - b;
  }
};
struct MulOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
struct DivOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a / b;
  }
};
// ONNX Mod with fmod = kFmod (binary_math.h).
template <bool kFmod>
struct ModOp {
  template <typename T>
  T operator()(T a, T b) const {
    return mod(a, b, kFmod);
  }
};
// ONNX PRelu: x, with x < 0 scaled by its (broadcast) slope; NaN propagates.
struct PReluOp {
  template <typename T>
  T operator()(T x, T slope) const {
    return x < T(0) ? slope * x : x;
  }
};

// Checks that every input shares the output's dtype and that the inputs broadcast to exactly
// the output's shape.
void check_broadcast(const KernelArgs& args, const std::vector<TensorView>& inputs,
                     const TensorView& y) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    args.expect_dtype(inputs[i], y.dtype, "input " + std::to_string(i));
  }
  args.expect_broadcast(inputs, y);
}

// y[i] = op(a[...], b[...]) with a and b broadcast to y.
template <typename T, typename Op>
void binary_rows(const StridedLoop& loop, const T* a, const T* b, T* y, Op op) {
  const int64_t sa = loop.inner_stride(1);
  const int64_t sb = loop.inner_stride(2);
  loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
    T* out = y + offsets[0];
    const T* x0 = a + offsets[1];
    const T* x1 = b + offsets[2];
    if (sa == 1 && sb == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = op(x0[i], x1[i]);
    } else if (sa == 0 && sb == 1) {
      const T v = x0[0];
      for (int64_t i = 0; i < n; ++i) out[i] = op(v, x1[i]);
    } else if (sa == 1 && sb == 0) {
      const T v = x1[0];
      for (int64_t i = 0; i < n; ++i) out[i] = op(x0[i], v);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = op(x0[i * sa], x1[i * sb]);
    }
  });
}

template <typename T, typename Op>
std::unique_ptr<PreparedKernel> make_binary(const KernelArgs& args) {
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  const StridedLoop loop(y.shape, {contiguous_strides(y.shape), broadcast_strides(a.shape, y.shape),
                                   broadcast_strides(b.shape, y.shape)});
  return make_kernel([loop, pa = a.as<const T>(), pb = b.as<const T>(),
                      py = y.as<T>()](const StepContext&) { binary_rows(loop, pa, pb, py, Op{}); });
}

template <typename Op>
KernelFactory binary_factory(bool allow_int64) {
  return [allow_int64](const KernelArgs& args) {
    args.expect_inputs(2, 2);
    args.expect_outputs(1, 1);
    const TensorView& y = args.output(0);
    check_broadcast(args, {args.input(0), args.input(1)}, y);
    if (y.dtype == plan::INT64 && allow_int64) {
      return make_binary<int64_t, Op>(args);
    }
    args.expect_dtype(y, plan::FLOAT32, "output 0");
    return make_binary<float, Op>(args);
  };
}

// Mod: float32 or int64; the attribute fmod picks the remainder's sign.
std::unique_ptr<PreparedKernel> mod_factory(const KernelArgs& args) {
  if (args.attributes().get_int("fmod", 0) != 0) return binary_factory<ModOp<true>>(true)(args);
  return binary_factory<ModOp<false>>(true)(args);
}

// ONNX Sum: y = x0 + x1 + ... with every input broadcast to y.
struct SumFold {
  template <typename T>
  T operator()(T accumulated, T x) const {
    return accumulated + x;
  }
};

// ONNX Mean: Sum's fold divided by the number of inputs; float32 only, as ONNX.
std::unique_ptr<PreparedKernel> mean_factory(const KernelArgs& args) {
  args.expect_dtype(args.output(0), plan::FLOAT32, "output 0");
  return prepare_nary_fold<SumFold>(args, 1.0f / static_cast<float>(args.num_inputs()));
}

}  // namespace

void register_elementwise_kernels(KernelTable& table) {
  table["Add"] = binary_factory<AddOp>(true);
  table["Sub"] = binary_factory<SubOp>(true);
  table["Mul"] = binary_factory<MulOp>(true);
  table["Div"] = binary_factory<DivOp>(false);
  table["Mod"] = mod_factory;
  table["PRelu"] = binary_factory<PReluOp>(false);
  table["Sum"] = nary_fold_factory<SumFold>;
  table["Mean"] = mean_factory;
  table["Neg"] = unary_factory<true>([](auto x) { return -x; });
  // NaN propagates, as in ONNX and PyTorch.
  table["Relu"] = unary_factory<false>([](float x) { return x < 0.0f ? 0.0f : x; });
  table["Tanh"] = unary_factory<false>([](float x) { return std::tanh(x); });
  table["Sigmoid"] = range_unary_factory(sigmoid_n);
  table["piper.ReluGrad"] =
      saved_grad_factory([](float dy, float y) { return y > 0.0f ? dy : 0.0f; }, "Y");
  table["piper.TanhGrad"] =
      saved_grad_factory([](float dy, float y) { return dy * (1.0f - y * y); }, "Y");
  table["piper.SigmoidGrad"] =
      saved_grad_factory([](float dy, float y) { return dy * y * (1.0f - y); }, "Y");
}

}  // namespace piper::engine::cpu
