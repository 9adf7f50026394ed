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

}  // namespace piper::engine::cpu
