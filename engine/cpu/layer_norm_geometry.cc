#include "engine/cpu/layer_norm_geometry.h"

namespace piper::engine::cpu {

LayerNormRows layer_norm_rows(const KernelArgs& args, const TensorView& x) {
  const int64_t given = args.attributes().get_int("axis", -1);
  const int64_t axis = given < 0 ? given + x.rank() : given;
  if (axis < 0 || axis >= x.rank()) {
    args.fail("axis " + std::to_string(given) + " is out of range for X of rank " +
              std::to_string(x.rank()));
  }
  LayerNormRows v;
  v.stats = x.shape;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < axis) {
      v.rows *= x.shape[d];
    } else {
      v.n *= x.shape[d];
      v.stats[d] = 1;
    }
  }
  return v;
}

void check_affine(const KernelArgs& args, const TensorView& x, const LayerNormRows& v,
                  const TensorView& t, const std::string& what) {
  args.expect_dtype(t, plan::FLOAT32, what);
  if (t.elements() != v.n) {
    args.fail(what + " has shape " + shape_string(t.shape) +
              " but the normalized dimensions of X " + shape_string(x.shape) + " hold " +
              std::to_string(v.n) + " elements; Piper needs one value per normalized element");
  }
}

void check_stats(const KernelArgs& args, const TensorView& t, const LayerNormRows& v,
                 const std::string& what) {
  args.expect_dtype(t, plan::FLOAT32, what);
  if (t.elements() != v.rows) {
    args.fail(what + " has shape " + shape_string(t.shape) + ", expected " + shape_string(v.stats));
  }
}

LayerNormRows check_layer_norm(const KernelArgs& args) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 3);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, plan::FLOAT32, "X (input 0)");
  args.expect_dtype(y, plan::FLOAT32, "Y (output 0)");
  args.expect_same_shape(x, "X (input 0)", y, "Y (output 0)");
  const LayerNormRows v = layer_norm_rows(args, x);
  check_affine(args, x, v, args.input(1), "Scale (input 1)");
  if (args.has_input(2)) check_affine(args, x, v, args.input(2), "B (input 2)");
  if (args.has_output(1)) check_stats(args, args.output(1), v, "Mean (output 1)");
  if (args.has_output(2)) check_stats(args, args.output(2), v, "InvStdDev (output 2)");
  return v;
}

LayerNormRows check_layer_norm_grad(const KernelArgs& args) {
  args.expect_inputs(5, 5);
  args.expect_outputs(1, 3);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(x, plan::FLOAT32, "X (input 1)");
  args.expect_same_shape(dy, "dY (input 0)", x, "X (input 1)");
  const LayerNormRows v = layer_norm_rows(args, x);
  check_affine(args, x, v, args.input(2), "Scale (input 2)");
  check_stats(args, args.input(3), v, "Mean (input 3)");
  check_stats(args, args.input(4), v, "InvStdDev (input 4)");
  if (args.has_output(0)) {
    args.expect_dtype(args.output(0), plan::FLOAT32, "dX (output 0)");
    args.expect_same_shape(args.output(0), "dX (output 0)", x, "X (input 1)");
  }
  if (args.has_output(1)) check_affine(args, x, v, args.output(1), "dScale (output 1)");
  if (args.has_output(2)) check_affine(args, x, v, args.output(2), "dBias (output 2)");
  return v;
}

}  // namespace piper::engine::cpu
