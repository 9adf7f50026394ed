// GELU as PyTorch exports it at opset 17, with the bias add of the Linear before it, becomes
// piper.BiasGelu(X[, Bias]) (docs/plan-format.md):
//   exact:  Y = Mul(Mul(H, Add(Erf(Div(H, √2) or Mul(H, 1/√2)), 1)), 0.5)
//   tanh:   Y = Mul(Mul(H, Add(Tanh(Mul(Add(H, Mul(Pow(H, 3) or H·H·H, 0.044715)), √(2/π))), 1)),
//           0.5)
// scalar constants on either side of Mul and Add; H = Add(X, Bias) with a 1-D Bias over H's
// last dimension is fused too when nothing else reads H, otherwise the fused op starts at H.
#include <algorithm>
#include <cmath>

#include "planner/fusion/fusion.h"

namespace piper::planner {
namespace {

bool near(float value, double expected) {
  return std::abs(value - expected) <= 1e-6 * std::abs(expected);
}

// The other input of a two-input op `id` given one of them, or -1.
ir::TensorId other_input(const PatternView& view, ir::OpId id, ir::TensorId one) {
  if (id < 0 || view.op(id).inputs.size() != 2) return -1;
  const ir::Op& op = view.op(id);
  if (op.inputs[0] == one) return op.inputs[1];
  return op.inputs[1] == one ? op.inputs[0] : -1;
}

class BiasGeluRule : public FusionRule {
 public:
  std::string name() const override { return "fuse-bias-gelu"; }

  std::optional<Fusion> match(const PatternView& view, ir::OpId root) const override {
    const ir::Op& op = view.op(root);
    if (op.type != "Mul" || op.outputs.size() != 1) return std::nullopt;
    const auto half = view.with_scalar(op.outputs[0], "Mul");
    if (!half || !near(half->value, 0.5)) return std::nullopt;
    const ir::OpId product = view.producer(half->other, "Mul");
    if (product < 0) return std::nullopt;
    for (ir::TensorId h : view.op(product).inputs) {
      Fusion fusion;
      fusion.matched = {root, product};
      const auto one_plus = view.with_scalar(other_input(view, product, h), "Add");
      if (!one_plus || !near(one_plus->value, 1.0)) continue;
      fusion.matched.push_back(one_plus->op);
      std::string approximate;
      if (erf_of(view, one_plus->other, h, fusion.matched)) {
        approximate = "none";
      } else if (tanh_of(view, one_plus->other, h, fusion.matched)) {
        approximate = "tanh";
      } else {
        continue;
      }
      fusion.fused.type = "piper.BiasGelu";
      fusion.fused.attributes["approximate"] = approximate;
      fusion.fused.inputs = with_bias(view, h, fusion.matched);
      return fusion;
    }
    return std::nullopt;
  }

 private:
  // Erf(H / √2) or Erf(H · 1/√2).
  static bool erf_of(const PatternView& view, ir::TensorId e, ir::TensorId h,
                     std::vector<ir::OpId>& matched) {
    const ir::OpId erf = view.producer(e, "Erf");
    if (erf < 0) return false;
    const ir::TensorId u = view.op(erf).inputs[0];
    const auto div = view.with_scalar(u, "Div");
    const auto mul = view.with_scalar(u, "Mul");
    const auto& scaled = div ? div : mul;
    if (!scaled || scaled->other != h ||
        !near(scaled->value, div ? std::sqrt(2.0) : std::sqrt(0.5))) {
      return false;
    }
    matched.insert(matched.end(), {erf, scaled->op});
    return true;
  }

  // Tanh(√(2/π) · (H + 0.044715 · H³)) with H³ = Pow(H, 3) or H · (H · H).
  static bool tanh_of(const PatternView& view, ir::TensorId t, ir::TensorId h,
                      std::vector<ir::OpId>& matched) {
    const ir::OpId tanh = view.producer(t, "Tanh");
    if (tanh < 0) return false;
    const auto scaled = view.with_scalar(view.op(tanh).inputs[0], "Mul");
    if (!scaled || !near(scaled->value, std::sqrt(2.0 / M_PI))) return false;
    const ir::OpId sum = view.producer(scaled->other, "Add");
    const auto term = view.with_scalar(other_input(view, sum, h), "Mul");
    if (!term || !near(term->value, 0.044715)) return false;
    std::vector<ir::OpId> cube;
    if (const auto pow = view.with_scalar(term->other, "Pow"); pow && pow->value == 3.0f) {
      if (pow->other != h) return false;
      cube = {pow->op};
    } else {
      const ir::OpId outer = view.producer(term->other, "Mul");
      const ir::OpId inner = view.producer(other_input(view, outer, h), "Mul");
      if (inner < 0 || view.op(inner).inputs != std::vector<ir::TensorId>{h, h}) return false;
      cube = {outer, inner};
    }
    matched.insert(matched.end(), {tanh, scaled->op, sum, term->op});
    matched.insert(matched.end(), cube.begin(), cube.end());
    return true;
  }

  // {X, Bias} when H = Add(X, Bias) (either order) with Bias 1-D over H's last dimension and
  // H read only by the matched ops, adding the Add to them; otherwise {H}.
  static std::vector<ir::TensorId> with_bias(const PatternView& view, ir::TensorId h,
                                             std::vector<ir::OpId>& matched) {
    const ir::OpId add = view.producer(h, "Add");
    const ir::Shape& shape = view.shape(h);
    if (add < 0 || shape.size() < 2) return {h};
    for (ir::OpId reader : view.consumers(h)) {
      if (std::find(matched.begin(), matched.end(), reader) == matched.end()) return {h};
    }
    for (size_t i : {size_t{0}, size_t{1}}) {
      const ir::TensorId x = view.op(add).inputs[1 - i];
      const ir::TensorId bias = view.op(add).inputs[i];
      if (view.shape(x) == shape && view.shape(bias) == ir::Shape{shape.back()}) {
        matched.push_back(add);
        return {x, bias};
      }
    }
    return {h};
  }
};

}  // namespace

std::unique_ptr<FusionRule> make_bias_gelu_rule() { return std::make_unique<BiasGeluRule>(); }

}  // namespace piper::planner
