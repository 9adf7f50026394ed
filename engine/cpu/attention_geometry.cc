#include "engine/cpu/attention_geometry.h"

#include <algorithm>

#include "engine/cpu/strided_loop.h"

namespace piper::engine::cpu {
namespace {

// The mask's shape against the scores [..., T, Tk]: its kind and where each batch index's
// rows start.
void lay_out_mask(const KernelArgs& args, const Shape& scores, size_t input, AttentionGeometry& g) {
  const TensorView& mask = args.input(input);
  const std::string what = "Mask (input " + std::to_string(input) + ")";
  if (!broadcasts_to(mask.shape, scores)) {
    args.fail(what + " of shape " + shape_string(mask.shape) +
              " does not broadcast to the scores " + shape_string(scores));
  }
  if (mask.dtype == plan::BOOL) {
    g.mask = AttentionGeometry::MaskKind::kFill;
    g.fill = static_cast<float>(args.attributes().require_float("fill"));
    g.fill_if = args.attributes().get_int("fill_if", 1) != 0;
  } else {
    args.expect_dtype(mask, plan::FLOAT32, what);
    g.mask = AttentionGeometry::MaskKind::kAdd;
  }
  const auto rank = static_cast<int64_t>(scores.size());
  const std::vector<int64_t> strides = broadcast_strides(mask.shape, scores);
  g.mask_row_stride = strides[rank - 2];
  g.mask_key_stride = strides[rank - 1];
  g.mask_offsets.assign(static_cast<size_t>(g.batch), 0);
  for (int64_t b = 0; b < g.batch; ++b) {
    int64_t rest = b;
    for (int64_t dim = rank - 3; dim >= 0; --dim) {
      g.mask_offsets[b] += rest % scores[dim] * strides[dim];
      rest /= scores[dim];
    }
  }
}

}  // namespace

AttentionGeometry attention_geometry(const KernelArgs& args, size_t first) {
  const TensorView& q = args.input(first);
  const TensorView& kt = args.input(first + 1);
  const TensorView& v = args.input(first + 2);
  const std::string names[] = {"Q (input " + std::to_string(first) + ")",
                               "Kt (input " + std::to_string(first + 1) + ")",
                               "V (input " + std::to_string(first + 2) + ")"};
  for (size_t i = 0; i < 3; ++i) args.expect_dtype(args.input(first + i), plan::FLOAT32, names[i]);
  const int64_t rank = q.rank();
  const bool same_batch = rank >= 2 && kt.rank() == rank && v.rank() == rank &&
                          std::equal(q.shape.begin(), q.shape.end() - 2, kt.shape.begin()) &&
                          std::equal(q.shape.begin(), q.shape.end() - 2, v.shape.begin());
  AttentionGeometry g;
  if (same_batch) {
    g.t = q.shape[rank - 2];
    g.d = q.shape[rank - 1];
    g.tk = kt.shape[rank - 1];
    g.dv = v.shape[rank - 1];
  }
  if (!same_batch || kt.shape[rank - 2] != g.d || v.shape[rank - 2] != g.tk) {
    args.fail(
        "needs Q [..., T, D], Kt [..., D, Tk] and V [..., Tk, Dv] with equal leading "
        "dimensions; got Q " +
        shape_string(q.shape) + ", Kt " + shape_string(kt.shape) + ", V " + shape_string(v.shape));
  }
  g.batch = product(q.shape, 0, rank - 2);
  g.scale = static_cast<float>(args.attributes().get_float("scale", 1.0));
  if (args.has_input(first + 3)) {
    Shape scores(q.shape.begin(), q.shape.end() - 1);
    scores.push_back(g.tk);
    lay_out_mask(args, scores, first + 3, g);
  }
  return g;
}

void check_row_statistic(const KernelArgs& args, const TensorView& stats,
                         const AttentionGeometry& g, const std::string& what) {
  args.expect_dtype(stats, plan::FLOAT32, what);
  if (stats.elements() != g.batch * g.t) {
    args.fail(what + " has shape " + shape_string(stats.shape) + ", expected one value per " +
              "query row (" + std::to_string(g.batch * g.t) + ")");
  }
}

void check_attention_outputs(const KernelArgs& args, const AttentionGeometry& g,
                             plan::DType y_dtype, const std::string& y_what) {
  const TensorView& y = args.output(0);
  args.expect_dtype(y, y_dtype, y_what);
  Shape expected(args.input(0).shape.begin(), args.input(0).shape.end() - 1);
  expected.push_back(g.dv);
  if (y.shape != expected) {
    args.fail("Y (output 0) has shape " + shape_string(y.shape) + ", expected " +
              shape_string(expected));
  }
  if (args.has_output(1)) check_row_statistic(args, args.output(1), g, "RowMax (output 1)");
  if (args.has_output(2)) check_row_statistic(args, args.output(2), g, "RowInvSum (output 2)");
}

}  // namespace piper::engine::cpu
