#include "engine/cpu/matmul_geometry.h"

#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {

MatmulGeometry matmul_geometry(const KernelArgs& args, const TensorView& a, const TensorView& b,
                               const TensorView& y, bool trans_a, bool trans_b) {
  if (a.rank() == 0 || b.rank() == 0) {
    args.fail("operands must have at least one dimension, got A " + shape_string(a.shape) +
              " and B " + shape_string(b.shape));
  }
  if ((a.rank() == 1 && trans_a) || (b.rank() == 1 && trans_b)) {
    args.fail("transA/transB need a matrix operand (rank >= 2), got A " + shape_string(a.shape) +
              " and B " + shape_string(b.shape));
  }
  const Shape a_mat =
      a.rank() == 1 ? Shape{1, a.shape[0]} : Shape(a.shape.end() - 2, a.shape.end());
  const Shape b_mat =
      b.rank() == 1 ? Shape{b.shape[0], 1} : Shape(b.shape.end() - 2, b.shape.end());
  const Shape a_batch = a.rank() <= 2 ? Shape{} : Shape(a.shape.begin(), a.shape.end() - 2);
  const Shape b_batch = b.rank() <= 2 ? Shape{} : Shape(b.shape.begin(), b.shape.end() - 2);
  MatmulGeometry g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = trans_a ? a_mat[1] : a_mat[0];
  g.k = trans_a ? a_mat[0] : a_mat[1];
  const int64_t kb = trans_b ? b_mat[1] : b_mat[0];
  g.n = trans_b ? b_mat[0] : b_mat[1];
  g.lda = a_mat[1];
  g.ldb = b_mat[1];
  if (g.k != kb) {
    args.fail("inner dimensions differ: A " + shape_string(a.shape) +
              (trans_a ? " (transposed)" : "") + " has K = " + std::to_string(g.k) + ", B " +
              shape_string(b.shape) + (trans_b ? " (transposed)" : "") +
              " has K = " + std::to_string(kb));
  }
  Shape batch;
  try {
    batch = broadcast_shapes(a_batch, b_batch);
  } catch (const Error& error) {
    args.fail(std::string("batch dimensions do not broadcast: ") + error.what());
  }
  Shape expected = batch;
  if (a.rank() > 1) expected.push_back(g.m);
  if (b.rank() > 1) expected.push_back(g.n);
  if (expected != y.shape) {
    args.fail("A " + shape_string(a.shape) + " times B " + shape_string(b.shape) + " gives " +
              shape_string(expected) + " but the output has shape " + shape_string(y.shape));
  }
  std::vector<int64_t> a_strides = broadcast_strides(a_batch, batch);
  std::vector<int64_t> b_strides = broadcast_strides(b_batch, batch);
  for (auto& stride : a_strides) stride *= a_mat[0] * a_mat[1];
  for (auto& stride : b_strides) stride *= b_mat[0] * b_mat[1];
  const StridedLoop loop(batch, {a_strides, b_strides});
  loop.for_each_row([&](const int64_t* offsets, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      g.a_offsets.push_back(offsets[0] + i * loop.inner_stride(0));
      g.b_offsets.push_back(offsets[1] + i * loop.inner_stride(1));
    }
  });
  for (size_t i = 0; i < g.a_offsets.size(); ++i) {
    g.y_offsets.push_back(static_cast<int64_t>(i) * g.m * g.n);
  }
  return g;
}

MatmulGeometry check_gemm(const KernelArgs& args) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 1);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  if (a.rank() != 2 || b.rank() != 2) {
    args.fail("A and B must be matrices, got A " + shape_string(a.shape) + " and B " +
              shape_string(b.shape));
  }
  if (args.has_input(2) && !broadcasts_to(args.input(2).shape, y.shape)) {
    args.fail("C " + shape_string(args.input(2).shape) + " does not broadcast to the output " +
              shape_string(y.shape));
  }
  const auto& attributes = args.attributes();
  return matmul_geometry(args, a, b, y, attributes.get_int("transA", 0) != 0,
                         attributes.get_int("transB", 0) != 0);
}

}  // namespace piper::engine::cpu
