// Comparisons and logic: ONNX Equal, Less, Greater, LessOrEqual, GreaterOrEqual, And, Or, Xor
// (numpy broadcasting, bool output), Not, and Cast and CastLike between float32, bfloat16,
// int64 and bool. Bools are one byte, 0 or 1.
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/cpu/bfloat16.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

struct EqualOp {
  template <typename T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};
struct LessOp {
  template <typename T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};
struct GreaterOp {
  template <typename T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};
struct LessOrEqualOp {
  template <typename T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GreaterOrEqualOp {
  template <typename T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct AndOp {
  bool operator()(uint8_t a, uint8_t b) const { return a != 0 && b != 0; }
};
struct OrOp {
  bool operator()(uint8_t a, uint8_t b) const { return a != 0 || b != 0; }
};
struct XorOp {
  bool operator()(uint8_t a, uint8_t b) const { return (a != 0) != (b != 0); }
};

template <typename T, typename Op>
std::unique_ptr<PreparedKernel> make_compare(const TensorView& a, const TensorView& b,
                                             const TensorView& y) {
  const StridedLoop loop(y.shape, {contiguous_strides(y.shape), broadcast_strides(a.shape, y.shape),
                                   broadcast_strides(b.shape, y.shape)});
  return make_kernel(
      [loop, pa = a.as<const T>(), pb = b.as<const T>(), py = y.as<uint8_t>()](const StepContext&) {
        const int64_t sa = loop.inner_stride(1);
        const int64_t sb = loop.inner_stride(2);
        const Op op;
        loop.for_each_row([&](const int64_t* offsets, int64_t n) {
          uint8_t* out = py + offsets[0];
          const T* x0 = pa + offsets[1];
          const T* x1 = pb + offsets[2];
          if (sa == 1 && sb == 1) {
            for (int64_t i = 0; i < n; ++i) out[i] = op(x0[i], x1[i]);
          } else {
            for (int64_t i = 0; i < n; ++i) out[i] = op(x0[i * sa], x1[i * sb]);
          }
        });
      });
}

// Comparisons of two float32, int64 (or, with kAllowBool, bool) inputs of one dtype.
template <typename Op, bool kAllowBool>
std::unique_ptr<PreparedKernel> compare_factory(const KernelArgs& args) {
  check_compare(args);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  switch (a.dtype) {
    case plan::FLOAT32:
      return make_compare<float, Op>(a, b, y);
    case plan::INT64:
      return make_compare<int64_t, Op>(a, b, y);
    case plan::BOOL:
      if (kAllowBool) return make_compare<uint8_t, Op>(a, b, y);
      [[fallthrough]];
    default:
      args.fail("inputs have dtype " + dtype_name(a.dtype) + ", expected float32, int64" +
                (kAllowBool ? " or bool" : ""));
  }
}

// And, Or, Xor: two bool inputs.
template <typename Op>
std::unique_ptr<PreparedKernel> logic_factory(const KernelArgs& args) {
  check_compare(args);
  args.expect_dtype(args.input(0), plan::BOOL, "input 0");
  return make_compare<uint8_t, Op>(args.input(0), args.input(1), args.output(0));
}

std::unique_ptr<PreparedKernel> not_factory(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, plan::BOOL, "input 0");
  args.expect_dtype(y, plan::BOOL, "output 0");
  args.expect_same_shape(x, "input 0", y, "output 0");
  return make_kernel(
      [n = y.elements(), px = x.as<const uint8_t>(), py = y.as<uint8_t>()](const StepContext&) {
        for (int64_t i = 0; i < n; ++i) py[i] = px[i] == 0 ? 1 : 0;
      });
}

// Element conversion as ONNX Cast: float to int64 truncates toward zero (NaN and values out
// of range give INT64_MIN, as x86 and numpy do), anything to bool is "≠ 0" (NaN is true),
// bool to numbers gives 0 or 1; bfloat16 converts as the float32 it widens to, and float32
// to bfloat16 rounds to nearest even.
template <typename From, typename To>
To convert(From x) {
  if constexpr (std::is_same_v<From, BFloat16>) {
    return convert<float, To>(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return x != From{0} ? 1 : 0;
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, int64_t>) {
    constexpr float kLimit = 9223372036854775808.0f;  // 2^63
    return x >= -kLimit && x < kLimit ? static_cast<int64_t>(x)
                                      : std::numeric_limits<int64_t>::min();
  } else {
    return static_cast<To>(x);
  }
}

template <typename From, typename To>
std::unique_ptr<PreparedKernel> make_cast(const TensorView& x, const TensorView& y) {
  return make_kernel(
      [n = y.elements(), px = x.as<const From>(), py = y.as<To>()](const StepContext&) {
        if constexpr (std::is_same_v<From, To>) {
          std::memcpy(py, px, static_cast<size_t>(n) * sizeof(To));
        } else {
          for (int64_t i = 0; i < n; ++i) py[i] = convert<From, To>(px[i]);
        }
      });
}

template <typename From>
std::unique_ptr<PreparedKernel> cast_from(const KernelArgs& args, const TensorView& x,
                                          const TensorView& y) {
  switch (y.dtype) {
    case plan::FLOAT32:
      return make_cast<From, float>(x, y);
    case plan::INT64:
      return make_cast<From, int64_t>(x, y);
    case plan::BOOL:
      return make_cast<From, uint8_t>(x, y);
    case plan::BFLOAT16:
      return make_cast<From, BFloat16>(x, y);
    default:
      args.fail("output has dtype " + dtype_name(y.dtype) +
                ", expected float32, bfloat16, int64 or bool");
  }
}

// The plan's dtype of an ONNX TensorProto data type, or DTYPE_UNSPECIFIED.
plan::DType from_onnx(int64_t onnx_type) {
  switch (onnx_type) {
    case 1:
      return plan::FLOAT32;
    case 7:
      return plan::INT64;
    case 9:
      return plan::BOOL;
    case 16:
      return plan::BFLOAT16;
    default:
      return plan::DTYPE_UNSPECIFIED;
  }
}

// X converted to Y's dtype, which the caller checked.
std::unique_ptr<PreparedKernel> make_cast_to_output(const KernelArgs& args) {
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_same_shape(x, "input 0", y, "output 0");
  switch (x.dtype) {
    case plan::FLOAT32:
      return cast_from<float>(args, x, y);
    case plan::INT64:
      return cast_from<int64_t>(args, x, y);
    case plan::BOOL:
      return cast_from<uint8_t>(args, x, y);
    case plan::BFLOAT16:
      return cast_from<BFloat16>(args, x, y);
    default:
      args.fail("input has dtype " + dtype_name(x.dtype) +
                ", expected float32, bfloat16, int64 or bool");
  }
}

std::unique_ptr<PreparedKernel> cast_factory(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const int64_t to = args.attributes().require_int("to");
  const plan::DType target = from_onnx(to);
  if (target == plan::DTYPE_UNSPECIFIED) {
    args.fail("to = " + std::to_string(to) +
              " is not a data type Piper supports (1 float32, 7 int64, 9 bool, 16 bfloat16)");
  }
  args.expect_dtype(args.output(0), target, "output 0 (the dtype `to` names)");
  return make_cast_to_output(args);
}

// CastLike(X, like): Cast to the dtype of `like`, whose values are not read.
std::unique_ptr<PreparedKernel> cast_like_factory(const KernelArgs& args) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  args.expect_dtype(args.output(0), args.input(1).dtype, "output 0 (the dtype of input 1)");
  return make_cast_to_output(args);
}

}  // namespace

void check_compare(const KernelArgs& args) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  args.expect_dtype(y, plan::BOOL, "output 0");
  args.expect_dtype(b, a.dtype, "input 1 (input 0's dtype)");
  args.expect_broadcast({a, b}, y);
}

void register_logical_kernels(KernelTable& table) {
  table["Equal"] = compare_factory<EqualOp, true>;
  table["Less"] = compare_factory<LessOp, false>;
  table["Greater"] = compare_factory<GreaterOp, false>;
  table["LessOrEqual"] = compare_factory<LessOrEqualOp, false>;
  table["GreaterOrEqual"] = compare_factory<GreaterOrEqualOp, false>;
  table["And"] = logic_factory<AndOp>;
  table["Or"] = logic_factory<OrOp>;
  table["Xor"] = logic_factory<XorOp>;
  table["Not"] = not_factory;
  table["Cast"] = cast_factory;
  table["CastLike"] = cast_like_factory;
}

}  // namespace piper::engine::cpu
