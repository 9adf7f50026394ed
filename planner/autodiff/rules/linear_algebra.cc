// Gemm and MatMul.
#include <algorithm>

#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

ir::Shape transposed_last2(ir::Shape shape, bool transpose) {
  if (transpose) std::swap(shape[shape.size() - 2], shape[shape.size() - 1]);
  return shape;
}

// Output shape of piper.MatMul(a, b) with optional transposes of the last two dims.
ir::Shape matmul_shape(const ir::Shape& a, bool trans_a, const ir::Shape& b, bool trans_b) {
  const ir::Shape ta = transposed_last2(a, trans_a);
  const ir::Shape tb = transposed_last2(b, trans_b);
  const size_t batch_rank = std::max(ta.size(), tb.size()) - 2;
  ir::Shape out(batch_rank, 1);
  for (size_t i = 0; i < batch_rank; ++i) {
    const auto dim = [&](const ir::Shape& s) {
      const size_t offset = batch_rank - (s.size() - 2);
      return i < offset ? int64_t{1} : s[i - offset];
    };
    out[i] = std::max(dim(ta), dim(tb));
  }
  out.push_back(ta[ta.size() - 2]);
  out.push_back(tb.back());
  return out;
}

void gemm_rule(GradientBuilder& g) {
  const ir::Attributes& attrs = g.op().attributes;
  const int64_t trans_a = ir::attr_int(attrs, "transA", 0);
  const int64_t trans_b = ir::attr_int(attrs, "transB", 0);
  const double alpha = ir::attr_float(attrs, "alpha", 1.0);
  const double beta = ir::attr_float(attrs, "beta", 1.0);
  const ir::TensorId dy = g.output_gradient(0);
  const ir::TensorId a = g.op().inputs[0];
  const ir::TensorId b = g.op().inputs[1];
  const auto gemm = [&](ir::TensorId x, ir::TensorId y, int64_t tx, int64_t ty, size_t input) {
    return g.emit("Gemm", {x, y}, g.input_shape(input),
                  {{"transA", tx}, {"transB", ty}, {"alpha", alpha}});
  };
  // With A' = op(A), B' = op(B): dA' = alpha dY B'^T and dB' = alpha A'^T dY.
  if (g.wants(0)) {
    g.contribute(0, trans_a ? gemm(b, dy, trans_b, 1, 0) : gemm(dy, b, 0, 1 - trans_b, 0));
  }
  if (g.wants(1)) {
    g.contribute(1, trans_b ? gemm(dy, a, 1, trans_a, 1) : gemm(a, dy, 1 - trans_a, 0, 1));
  }
  if (g.wants(2)) {
    ir::TensorId dc = g.sum_to_input(dy, 2);
    if (beta != 1.0) {
      dc = g.emit("Mul", {dc, g.constant(static_cast<float>(beta))}, g.input_shape(2));
    }
    g.contribute(2, dc);
  }
}

// The gradients of MatMul, and of piper.MatMul as the fusion pass writes it: transB
// (op(B) = Bᵀ) and an optional Bias over the last dimension, given `dy`, the gradient of the
// (biased) product. With op(B): dA = dY op(B)ᵀ and d op(B) = Aᵀ dY.
void product_gradients(GradientBuilder& g, ir::TensorId dy) {
  const ir::Shape a = g.input_shape(0);
  const ir::Shape b = g.input_shape(1);
  if (a.size() < 2 || b.size() < 2) {
    throw Error("node '" + g.op().name + "' (" + g.op().type +
                "): gradients of MatMul with a 1-D operand are not implemented yet");
  }
  const bool trans_b = ir::attr_int(g.op().attributes, "transB", 0) != 0;
  if (ir::attr_int(g.op().attributes, "transA", 0) != 0 || (trans_b && b.size() != 2)) {
    throw Error("node '" + g.op().name + "' (" + g.op().type +
                "): gradients of transA, or of transB with a batched B, are not implemented");
  }
  const ir::Shape dy_shape = g.shape(dy);
  const ir::TensorId a_id = g.op().inputs[0];
  const ir::TensorId b_id = g.op().inputs[1];
  if (g.wants(0)) {
    const ir::TensorId da =
        g.emit("piper.MatMul", {dy, b_id}, matmul_shape(dy_shape, false, b, !trans_b),
               {{"transB", int64_t{trans_b ? 0 : 1}}});
    g.contribute(0, g.sum_to_input(da, 0));
  }
  const auto transposed_product = [&](ir::TensorId x, ir::TensorId y, const ir::Shape& shape) {
    return g.emit("piper.MatMul", {x, y}, shape, {{"transA", int64_t{1}}});
  };
  if (g.wants(1) && b.size() == 2 && a.size() > 2) {
    // A weight shared by every batch (a Linear layer): dB = Σ_b A_bᵀ dY_b is one GEMM over the
    // batches stacked into rows, not one small GEMM per batch summed afterwards.
    const auto rows = [&](const ir::Shape& s) {
      int64_t count = 1;
      for (size_t i = 0; i + 1 < s.size(); ++i) count *= s[i];
      return ir::Shape{count, s.back()};
    };
    const ir::Shape a2 = rows(a), dy2 = rows(dy_shape);
    const ir::TensorId a_rows = g.emit("Reshape", {a_id, g.constant(a2)}, a2);
    const ir::TensorId dy_rows = g.emit("Reshape", {dy, g.constant(dy2)}, dy2);
    g.contribute(1, trans_b ? transposed_product(dy_rows, a_rows, b)
                            : transposed_product(a_rows, dy_rows, b));
  } else if (g.wants(1)) {
    const ir::TensorId db =
        trans_b ? transposed_product(dy, a_id, b)
                : transposed_product(a_id, dy, matmul_shape(a, true, dy_shape, false));
    g.contribute(1, g.sum_to_input(db, 1));
  }
  if (g.has_input(2) && g.wants(2)) g.contribute(2, g.sum_to_input(dy, 2));
}

// A product with activation = "gelu_tanh" (the fusion pass's Linear + GELU) outputs
// Y = GELU(P) of the biased product P; the forward also writes P (PreActivation), from which
// dP = dY · GELU'(P).
void matmul_rule(GradientBuilder& g) {
  ir::TensorId dy = g.output_gradient(0);
  if (ir::attr_string(g.op().attributes, "activation", "") == "gelu_tanh") {
    const ir::Shape shape = g.output_shape(0);
    const ir::TensorId pre = g.ensure_output(1, "PreActivation", g.dtype(g.op().outputs[0]), shape);
    dy = g.emit("piper.BiasGeluGrad", {dy, pre}, shape, {{"approximate", std::string("tanh")}});
  }
  product_gradients(g, dy);
}

}  // namespace

void add_linear_algebra_rules(GradientRules& rules) {
  rules["Gemm"] = gemm_rule;
  rules["MatMul"] = matmul_rule;
  rules["piper.MatMul"] = matmul_rule;
}

}  // namespace piper::planner
