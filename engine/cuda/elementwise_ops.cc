// Elementwise ops on CUDA: Add, Sub, Mul, Div, Mod, PRelu, Sum, Mean, Max, Min (numpy
// broadcasting), Neg, Relu, Tanh, Sigmoid, Sqrt, Reciprocal, Exp, Log, Erf and their
// saved-tensor gradients, Equal, Less, Greater, LessOrEqual, GreaterOrEqual, And, Or, Xor, Not,
// Where, Cast and CastLike. Checks follow the CPU kernels
// (engine/cpu/elementwise.cc, math.cc, logical.cc, layout_ops.cc). The broadcasting
// arithmetic, Where and Cast take bfloat16 tensors too; the maps and comparisons take
// float32, the backend widening bfloat16 tensors for them (CudaBackend::prepare).
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

// Add, Sub, Mul, Div: two inputs of the output's dtype (int64 unless `float_only`), or, for a
// float output, float inputs of either float dtype (a float32 scalar beside bfloat16 tensors).
CudaKernelFactory binary_factory(Binary op, bool float_only) {
  return [op, float_only](const KernelArgs& args, CudaContext& context) {
    args.expect_inputs(2, 2);
    args.expect_outputs(1, 1);
    const TensorView& a = args.input(0);
    const TensorView& b = args.input(1);
    const TensorView& y = args.output(0);
    args.expect_broadcast({a, b}, y);
    const StridedIndex index = broadcast_index(y.shape, {a.shape, b.shape});
    if (is_float(y.dtype)) {
      expect_float(args, a, "input 0");
      expect_float(args, b, "input 1");
      return make_kernel([&context, op, index, fa = float_view(a), fb = float_view(b),
                          fy = float_view(y)](const StepContext&) {
        launch_float_binary(op, index, fa, fb, fy, context.stream());
      });
    }
    args.expect_dtype(a, y.dtype, "input 0");
    args.expect_dtype(b, y.dtype, "input 1");
    if (float_only) args.expect_dtype(y, plan::FLOAT32, "output 0");
    const Element type = element_type(args, y, "output 0");
    return make_kernel(
        [&context, op, type, index, pa = a.data, pb = b.data, py = y.data](const StepContext&) {
          launch_binary(op, type, index, pa, pb, py, context.stream());
        });
  };
}

// Mod: Add's checks; the attribute fmod picks the remainder's sign.
std::unique_ptr<PreparedKernel> mod_factory(const KernelArgs& args, CudaContext& context) {
  const bool fmod = args.attributes().get_int("fmod", 0) != 0;
  return binary_factory(fmod ? Binary::kFmod : Binary::kMod, false)(args, context);
}

// Sum, Max, Min, Mean: y = x0 broadcast, then y = op(y, xk) for each further input; with
// `mean`, float only, y is then divided by the number of inputs. Float inputs may be of either
// float dtype; a bfloat16 output of several inputs folds them in float32 scratch
// (stream-ordered, for the run) and is rounded once, from the last step.
CudaKernelFactory fold_factory(Binary op, bool mean = false) {
  return [=](const KernelArgs& args, CudaContext& context) -> std::unique_ptr<PreparedKernel> {
    if (args.num_inputs() < 1) args.fail("takes at least one input, the plan gives none");
    args.expect_outputs(1, 1);
    const TensorView& y = args.output(0);
    const bool floats = is_float(y.dtype);
    std::vector<TensorView> inputs;
    for (size_t i = 0; i < args.num_inputs(); ++i) {
      inputs.push_back(args.input(i));
      const std::string what = "input " + std::to_string(i);
      if (floats) {
        expect_float(args, inputs[i], what);
      } else {
        args.expect_dtype(inputs[i], y.dtype, what);
      }
    }
    args.expect_broadcast(inputs, y);
    std::vector<std::pair<StridedIndex, TensorView>> steps;
    for (const TensorView& x : inputs) {
      const StridedIndex index = steps.empty() ? broadcast_index(y.shape, {x.shape})
                                               : broadcast_index(y.shape, {y.shape, x.shape});
      steps.emplace_back(index, x);
    }
    if (mean) args.expect_dtype(y, plan::FLOAT32, "output 0");
    if (floats) {
      const bool scratch = y.dtype == plan::BFLOAT16 && steps.size() > 1;
      const float scale = mean ? 1.0f / static_cast<float>(steps.size()) : 1.0f;
      return make_kernel([&context, op, steps, scratch, scale, fy = float_view(y),
                          same = broadcast_index(y.shape, {y.shape}),
                          bytes = y.elements() * sizeof(float)](const StepContext&) {
        const cudaStream_t stream = context.stream();
        FloatView sum = fy;  // the running fold
        if (scratch) {
          sum.bf16 = false;
          PIPER_CUDA_CHECK(cudaMallocAsync(&sum.data, bytes, stream));
        }
        const size_t last = steps.size() - 1;
        launch_scaled_copy(steps[0].first, float_view(steps[0].second), last == 0 ? fy : sum,
                           last == 0 ? scale : 1.0f, stream);
        for (size_t k = 1; k <= last; ++k) {
          launch_float_binary(op, steps[k].first, sum, float_view(steps[k].second),
                              k == last ? fy : sum, stream);
        }
        if (last > 0 && scale != 1.0f) launch_scaled_copy(same, fy, fy, scale, stream);
        if (scratch) PIPER_CUDA_CHECK(cudaFreeAsync(sum.data, stream));
      });
    }
    const Element type = element_type(args, y, "output 0");
    return make_kernel([&context, op, type, steps, py = y.data](const StepContext&) {
      launch_strided_copy(steps[0].first, dtype_size(steps[0].second.dtype), steps[0].second.data,
                          py, context.stream());
      for (size_t k = 1; k < steps.size(); ++k) {
        launch_binary(op, type, steps[k].first, py, steps[k].second.data, py, context.stream());
      }
    });
  };
}

// Same-shape maps; kNeg also takes int64.
CudaKernelFactory unary_factory(Unary op) {
  return [op](const KernelArgs& args, CudaContext& context) {
    args.expect_inputs(1, 1);
    args.expect_outputs(1, 1);
    const TensorView& x = args.input(0);
    const TensorView& y = args.output(0);
    args.expect_same_shape(x, "input 0", y, "output 0");
    args.expect_dtype(x, y.dtype, "input 0");
    Element type = Element::kFloat32;
    if (op == Unary::kNot) {
      args.expect_dtype(y, plan::BOOL, "output 0");
      type = Element::kBool;
    } else if (op != Unary::kNeg || y.dtype != plan::INT64) {
      args.expect_dtype(y, plan::FLOAT32, "output 0");
    } else {
      type = Element::kInt64;
    }
    return make_kernel(
        [&context, op, type, n = y.elements(), px = x.data, py = y.data](const StepContext&) {
          launch_unary(op, type, n, px, py, context.stream());
        });
  };
}

// dX = f(dY, S) with S saved from the forward op; all three float32 of one shape.
CudaKernelFactory saved_grad_factory(SavedGrad op, const char* saved) {
  return [op, saved](const KernelArgs& args, CudaContext& context) {
    args.expect_saved_grad(saved);
    const TensorView& dy = args.input(0);
    const TensorView& s = args.input(1);
    const TensorView& dx = args.output(0);
    return make_kernel([&context, op, n = dx.elements(), pdy = dy.as<const float>(),
                        ps = s.as<const float>(), pdx = dx.as<float>()](const StepContext&) {
      launch_saved_grad(op, n, pdy, ps, pdx, context.stream());
    });
  };
}

// Equal (also bool), Less, Greater, LessOrEqual, GreaterOrEqual: two inputs of one dtype
// broadcast to a bool output.
CudaKernelFactory compare_factory(Binary op, bool allow_bool) {
  return [op, allow_bool](const KernelArgs& args, CudaContext& context) {
    cpu::check_compare(args);
    const TensorView& a = args.input(0);
    const TensorView& b = args.input(1);
    const TensorView& y = args.output(0);
    const Element type = element_type(args, a, "inputs", allow_bool);
    const StridedIndex index = broadcast_index(y.shape, {a.shape, b.shape});
    return make_kernel(
        [&context, op, type, index, pa = a.data, pb = b.data, py = y.data](const StepContext&) {
          launch_binary(op, type, index, pa, pb, py, context.stream());
        });
  };
}

// And, Or, Xor: two bool inputs broadcast to a bool output.
CudaKernelFactory logic_factory(Binary op) {
  return [op](const KernelArgs& args, CudaContext& context) {
    args.expect_dtype(args.input(0), plan::BOOL, "input 0");
    return compare_factory(op, true)(args, context);
  };
}

std::unique_ptr<PreparedKernel> where_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(3, 3);
  args.expect_outputs(1, 1);
  const TensorView& c = args.input(0);
  const TensorView& x = args.input(1);
  const TensorView& y = args.input(2);
  const TensorView& out = args.output(0);
  args.expect_dtype(c, plan::BOOL, "condition (input 0)");
  args.expect_broadcast({c, x, y}, out);
  const StridedIndex index = broadcast_index(out.shape, {c.shape, x.shape, y.shape});
  if (is_float(out.dtype)) {  // X and Y of either float dtype
    expect_float(args, x, "X (input 1)");
    expect_float(args, y, "Y (input 2)");
    return make_kernel([&context, index, pc = c.as<const uint8_t>(), fx = float_view(x),
                        fy = float_view(y), fo = float_view(out)](const StepContext&) {
      launch_float_where(index, pc, fx, fy, fo, context.stream());
    });
  }
  args.expect_dtype(x, out.dtype, "X (input 1)");
  args.expect_dtype(y, out.dtype, "Y (input 2)");
  return make_kernel([&context, index, width = dtype_size(out.dtype), pc = c.as<const uint8_t>(),
                      px = x.data, py = y.data, po = out.data](const StepContext&) {
    launch_where(index, width, pc, px, py, po, context.stream());
  });
}

// The element type of a Cast operand: float32, bfloat16, int64 or bool.
Element cast_element(const KernelArgs& args, const TensorView& view, const std::string& what) {
  return view.dtype == plan::BFLOAT16 ? Element::kBFloat16 : element_type(args, view, what, true);
}

// X converted to Y's dtype, which the caller checked.
std::unique_ptr<PreparedKernel> cast_to_output(const KernelArgs& args, CudaContext& context) {
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_same_shape(x, "input 0", y, "output 0");
  const Element from = cast_element(args, x, "input");
  if (x.dtype == y.dtype) return copy_kernel(context, x.data, y.data, y.bytes());
  return make_kernel(
      [&context, from, into = cast_element(args, y, "output"), n = y.elements(), px = x.data,
       py = y.data](const StepContext&) { launch_cast(from, into, n, px, py, context.stream()); });
}

std::unique_ptr<PreparedKernel> cast_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const int64_t to = args.attributes().require_int("to");
  const plan::DType target = to == 1    ? plan::FLOAT32
                             : to == 7  ? plan::INT64
                             : to == 9  ? plan::BOOL
                             : to == 16 ? plan::BFLOAT16
                                        : plan::DTYPE_UNSPECIFIED;
  if (target == plan::DTYPE_UNSPECIFIED) {
    args.fail("to = " + std::to_string(to) +
              " is not a data type Piper supports (1 float32, 7 int64, 9 bool, 16 bfloat16)");
  }
  args.expect_dtype(args.output(0), target, "output 0 (the dtype `to` names)");
  return cast_to_output(args, context);
}

// CastLike(X, like): Cast to the dtype of `like`, whose values are not read.
std::unique_ptr<PreparedKernel> cast_like_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  args.expect_dtype(args.output(0), args.input(1).dtype, "output 0 (the dtype of input 1)");
  return cast_to_output(args, context);
}

}  // namespace

void register_elementwise_kernels(CudaKernelTable& table) {
  table["Add"] = binary_factory(Binary::kAdd, false);
  table["Sub"] = binary_factory(Binary::kSub, false);
  table["Mul"] = binary_factory(Binary::kMul, false);
  table["Div"] = binary_factory(Binary::kDiv, true);
  table["PRelu"] = binary_factory(Binary::kPRelu, true);
  table["Mod"] = mod_factory;
  table["Sum"] = fold_factory(Binary::kAdd);
  table["Mean"] = fold_factory(Binary::kAdd, true);
  table["Max"] = fold_factory(Binary::kMax);
  table["Min"] = fold_factory(Binary::kMin);
  table["Neg"] = unary_factory(Unary::kNeg);
  table["Relu"] = unary_factory(Unary::kRelu);
  table["Tanh"] = unary_factory(Unary::kTanh);
  table["Sigmoid"] = unary_factory(Unary::kSigmoid);
  table["Sqrt"] = unary_factory(Unary::kSqrt);
  table["Reciprocal"] = unary_factory(Unary::kReciprocal);
  table["Exp"] = unary_factory(Unary::kExp);
  table["Log"] = unary_factory(Unary::kLog);
  table["Erf"] = unary_factory(Unary::kErf);
  table["Not"] = unary_factory(Unary::kNot);
  table["piper.ReluGrad"] = saved_grad_factory(SavedGrad::kRelu, "Y");
  table["piper.TanhGrad"] = saved_grad_factory(SavedGrad::kTanh, "Y");
  table["piper.SigmoidGrad"] = saved_grad_factory(SavedGrad::kSigmoid, "Y");
  table["piper.SqrtGrad"] = saved_grad_factory(SavedGrad::kSqrt, "Y");
  table["piper.ReciprocalGrad"] = saved_grad_factory(SavedGrad::kReciprocal, "Y");
  table["piper.ErfGrad"] = saved_grad_factory(SavedGrad::kErf, "X");
  table["Equal"] = compare_factory(Binary::kEqual, true);
  table["Less"] = compare_factory(Binary::kLess, false);
  table["Greater"] = compare_factory(Binary::kGreater, false);
  table["LessOrEqual"] = compare_factory(Binary::kLessOrEqual, false);
  table["GreaterOrEqual"] = compare_factory(Binary::kGreaterOrEqual, false);
  table["And"] = logic_factory(Binary::kAnd);
  table["Or"] = logic_factory(Binary::kOr);
  table["Xor"] = logic_factory(Binary::kXor);
  table["Where"] = where_factory;
  table["Cast"] = cast_factory;
  table["CastLike"] = cast_like_factory;
}

}  // namespace piper::engine::cuda
