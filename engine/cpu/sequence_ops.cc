// Kernels that scan or generate sequences: ONNX CumSum, Range and
// ConstantOfShape. Scalar inputs (CumSum's axis, Range's start and delta) are
// read at run time; lengths come from the plan's output shapes.
#include <algorithm>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// CumSum along `axis` (an int64 scalar input read each run): exclusive leaves out the element
// itself, reverse sums from the end. Accumulates in double for float32.
template <typename T, typename Acc>
std::unique_ptr<PreparedKernel> make_cum_sum(const KernelArgs& args, const TensorView& x,
                                             const TensorView& axis, const TensorView& y) {
  const bool exclusive = args.attributes().get_int("exclusive", 0) != 0;
  const bool reverse = args.attributes().get_int("reverse", 0) != 0;
  return make_kernel([op = args.op(), shape = x.shape, exclusive, reverse,
                      pa = axis.as<const int64_t>(), px = x.as<const T>(), py = y.as<T>(),
                      acc = std::vector<Acc>()](const StepContext&) mutable {
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t a = *pa < 0 ? *pa + rank : *pa;
    if (a < 0 || a >= rank) throw Error(cum_sum_axis_error(op, *pa, rank));
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= shape[d];
    for (int64_t d = a + 1; d < rank; ++d) inner *= shape[d];
    const int64_t n = shape[a];
    acc.assign(static_cast<size_t>(inner), Acc{0});
    for (int64_t o = 0; o < outer; ++o) {
      std::fill(acc.begin(), acc.end(), Acc{0});
      for (int64_t step = 0; step < n; ++step) {
        const int64_t j = reverse ? n - 1 - step : step;
        const T* in = px + (o * n + j) * inner;
        T* out = py + (o * n + j) * inner;
        for (int64_t k = 0; k < inner; ++k) {
          const Acc before = acc[k];
          acc[k] += static_cast<Acc>(in[k]);
          out[k] = static_cast<T>(exclusive ? before : acc[k]);
        }
      }
    }
  });
}

std::unique_ptr<PreparedKernel> cum_sum_factory(const KernelArgs& args) {
  check_cum_sum(args);
  const TensorView& x = args.input(0);
  const TensorView& axis = args.input(1);
  const TensorView& y = args.output(0);
  if (y.dtype == plan::INT64) return make_cum_sum<int64_t, int64_t>(args, x, axis, y);
  return make_cum_sum<float, double>(args, x, axis, y);
}

// Range: out[i] = start + i * delta for the plan's output length.
template <typename T>
std::unique_ptr<PreparedKernel> make_range(const KernelArgs& args, const TensorView& y) {
  return make_kernel([ps = args.input(0).as<const T>(), pd = args.input(2).as<const T>(),
                      py = y.as<T>(), n = y.elements()](const StepContext&) {
    const T start = *ps, delta = *pd;
    for (int64_t i = 0; i < n; ++i) py[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  });
}

std::unique_ptr<PreparedKernel> range_factory(const KernelArgs& args) {
  args.expect_inputs(3, 3);
  args.expect_outputs(1, 1);
  const TensorView& y = args.output(0);
  if (y.rank() != 1) args.fail("the output must be 1-D, got " + shape_string(y.shape));
  for (size_t i = 0; i < 3; ++i) {
    const TensorView& v = args.input(i);
    args.expect_dtype(v, y.dtype, "input " + std::to_string(i));
    if (v.elements() != 1) args.fail("input " + std::to_string(i) + " must be a scalar");
  }
  if (y.dtype == plan::INT64) return make_range<int64_t>(args, y);
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  return make_range<float>(args, y);
}

// ConstantOfShape: the output (its shape from the plan) filled with attribute `value`
// (default 0), converted to the output's dtype.
std::unique_ptr<PreparedKernel> constant_of_shape_factory(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const TensorView& shape = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(shape, plan::INT64, "shape (input 0)");
  if (shape.rank() != 1 || shape.elements() != y.rank()) {
    args.fail("shape (input 0) " + shape_string(shape.shape) + " must list the output's " +
              std::to_string(y.rank()) + " dimensions");
  }
  const double value = args.attributes().get_float("value", 0.0);
  const int64_t n = y.elements();
  switch (y.dtype) {
    case plan::FLOAT32:
      return make_kernel([py = y.as<float>(), n, v = static_cast<float>(value)](
                             const StepContext&) { std::fill(py, py + n, v); });
    case plan::INT64:
      return make_kernel([py = y.as<int64_t>(), n, v = static_cast<int64_t>(value)](
                             const StepContext&) { std::fill(py, py + n, v); });
    case plan::BOOL:
      return make_kernel([py = y.as<uint8_t>(), n, v = static_cast<uint8_t>(value != 0.0)](
                             const StepContext&) { std::fill(py, py + n, v); });
    default:
      args.fail("the output has dtype " + dtype_name(y.dtype) + ", which Piper does not support");
  }
}

}  // namespace

void check_cum_sum(const KernelArgs& args) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& axis = args.input(1);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "input 0");
  args.expect_same_shape(x, "input 0", y, "output 0");
  args.expect_dtype(axis, plan::INT64, "axis (input 1)");
  if (axis.elements() != 1) args.fail("axis (input 1) must hold one value");
  if (x.rank() == 0) args.fail("the input must have at least one dimension");
  if (y.dtype != plan::INT64) args.expect_dtype(y, plan::FLOAT32, "output 0");
}

std::string cum_sum_axis_error(const std::string& op, int64_t axis, int64_t rank) {
  return op + ": axis " + std::to_string(axis) + " is out of range for rank " +
         std::to_string(rank);
}

void register_sequence_kernels(KernelTable& table) {
  table["CumSum"] = cum_sum_factory;
  table["Range"] = range_factory;
  table["ConstantOfShape"] = constant_of_shape_factory;
}

}  // namespace piper::engine::cpu
