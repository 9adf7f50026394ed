// ONNX Hardmax (opset 13): 1 at the first largest element of each line along `axis`, 0
// elsewhere; float32. NaN counts as the largest, as numpy's argmax in ONNX's reference
// (selection_order.h, shared with the CUDA kernel). Its axis checks serve Softmax and
// LogSoftmax too (op_checks.h).
#include <algorithm>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/parallel.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// X as lines along the attribute `axis` (default -1).
AxisLines axis_lines(const KernelArgs& args, const TensorView& x) {
  if (x.rank() == 0) args.fail("the input must have at least one dimension");
  const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", -1), x.rank());
  AxisLines lines;
  lines.n = x.shape[axis];
  for (int64_t d = 0; d < axis; ++d) lines.outer *= x.shape[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d) lines.inner *= x.shape[d];
  return lines;
}

std::unique_ptr<PreparedKernel> hardmax_factory(const KernelArgs& args) {
  const AxisLines lines = check_along_axis(args);
  return make_kernel([lines, px = args.input(0).as<const float>(),
                      py = args.output(0).as<float>()](const StepContext&) {
    const int64_t per_line = std::max<int64_t>(lines.n, 1);
    parallel_for(lines.outer * lines.inner, (kParallelGrain + per_line - 1) / per_line,
                 [&](int64_t begin, int64_t end) {
                   for (int64_t line = begin; line < end; ++line) {
                     const int64_t base =
                         line / lines.inner * lines.n * lines.inner + line % lines.inner;
                     const float* in = px + base;
                     float* out = py + base;
                     int64_t best = 0;
                     for (int64_t j = 0; j < lines.n; ++j) {
                       out[j * lines.inner] = 0.0f;
                       if (more_extreme<true>(in[j * lines.inner], in[best * lines.inner]))
                         best = j;
                     }
                     if (lines.n > 0) out[best * lines.inner] = 1.0f;
                   }
                 });
  });
}

}  // namespace

AxisLines check_along_axis(const KernelArgs& args) {
  check_float_unary(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_same_shape(x, "input 0", y, "output 0");
  return axis_lines(args, x);
}

AxisLines check_softmax_grad(const KernelArgs& args) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& dy = args.input(0);
  const TensorView& y = args.input(1);
  const TensorView& dx = args.output(0);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(y, plan::FLOAT32, "Y (input 1)");
  args.expect_dtype(dx, plan::FLOAT32, "dX (output 0)");
  args.expect_same_shape(dy, "dY (input 0)", dx, "dX (output 0)");
  args.expect_same_shape(y, "Y (input 1)", dx, "dX (output 0)");
  return axis_lines(args, y);
}

void register_hardmax_kernels(KernelTable& table) { table["Hardmax"] = hardmax_factory; }

}  // namespace piper::engine::cpu
