// A Linear layer as PyTorch exports it for inputs of rank > 2,
//   Y = Add(MatMul(X, Transpose(W)), Bias)   (Bias 1-D over Y's last dimension, either side),
// becomes piper.MatMul(X, W, Bias) with transB = 1 (docs/plan-format.md): the product reads W as
// it is stored, with no transposed copy per step, and adds the bias itself, with no separate
// pass over Y. MatMul(X, Transpose(W)) alone and MatMul(X, W) + Bias fuse too.
#include "planner/fusion/fusion.h"

namespace piper::planner {
namespace {

// Whether `op` swaps the two dimensions of a matrix.
bool is_matrix_transpose(const PatternView& view, const ir::Op& op) {
  if (op.inputs.size() != 1 || view.shape(op.inputs[0]).size() != 2) return false;
  const auto perm = op.attributes.find("perm");
  return perm == op.attributes.end() ||
         ir::attr_ints(op.attributes, "perm") == std::vector<int64_t>{1, 0};
}

class LinearRule : public FusionRule {
 public:
  std::string name() const override { return "fuse-linear"; }

  std::optional<Fusion> match(const PatternView& view, ir::OpId root) const override {
    Fusion fusion;
    fusion.matched = {root};
    ir::OpId product = root;
    ir::TensorId bias = -1;
    const ir::Op& op = view.op(root);
    if (op.type == "Add" && op.inputs.size() == 2) {
      product = -1;
      for (size_t i : {size_t{0}, size_t{1}}) {
        const ir::OpId candidate = view.producer(op.inputs[i], "MatMul");
        if (candidate >= 0 && is_bias(view, op.inputs[1 - i], op.outputs[0], op.inputs[i])) {
          product = candidate;
          bias = op.inputs[1 - i];
          break;
        }
      }
      if (product < 0) return std::nullopt;
      fusion.matched.push_back(product);
    } else if (op.type != "MatMul") {
      return std::nullopt;
    }
    const ir::Op& matmul = view.op(product);
    if (matmul.inputs.size() != 2 || view.shape(matmul.inputs[0]).size() < 2) return std::nullopt;
    ir::TensorId weight = matmul.inputs[1];
    const ir::OpId transpose = view.producer(weight, "Transpose");
    const bool trans_b = transpose >= 0 && is_matrix_transpose(view, view.op(transpose));
    if (trans_b) {
      weight = view.op(transpose).inputs[0];
      fusion.matched.push_back(transpose);
    } else if (bias < 0 || view.shape(weight).size() < 2) {
      return std::nullopt;  // a plain MatMul, or one with a vector operand
    }
    fusion.fused.type = "piper.MatMul";
    fusion.fused.inputs = {matmul.inputs[0], weight};
    if (bias >= 0) fusion.fused.inputs.push_back(bias);
    if (trans_b) fusion.fused.attributes["transB"] = int64_t{1};
    return fusion;
  }

 private:
  // Whether `bias` is a vector over the last dimension of `sum` = `product` + `bias`.
  static bool is_bias(const PatternView& view, ir::TensorId bias, ir::TensorId sum,
                      ir::TensorId product) {
    const ir::Shape& shape = view.shape(sum);
    return !shape.empty() && view.shape(product) == shape &&
           view.shape(bias) == ir::Shape{shape.back()};
  }
};

}  // namespace

std::unique_ptr<FusionRule> make_linear_rule() { return std::make_unique<LinearRule>(); }

}  // namespace piper::planner
