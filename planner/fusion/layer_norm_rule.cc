// LayerNorm written as separate ops becomes one ONNX LayerNormalization (opset 17), whose
// kernel and gradient rule Piper already has:
//   mean = ReduceMean(X), D = Sub(X, mean), var = ReduceMean(Pow(D, 2) or Mul(D, D)),
//   N = Div(D, Sqrt(Add(var, eps))), Y = Add(Mul(N, scale), bias)
// with both ReduceMeans over the same trailing axes with keepdims, and the affine parts each
// optional and in either operand order. Scale and bias hold one value per normalized element
// (leading ones allowed); without a scale, a planner constant of ones takes its place.
#include <algorithm>
#include <cstring>

#include "planner/fusion/fusion.h"

namespace piper::planner {
namespace {

// The part from X to N.
struct Normalized {
  ir::TensorId x = -1;
  int64_t axis = 0;
  float epsilon = 0;
  std::vector<ir::OpId> ops;
};

// The first normalized axis of a ReduceMean that keeps dimensions and reduces trailing ones
// (axes as attribute up to opset 17, as input from 18), or nullopt.
std::optional<int64_t> trailing_axis(const PatternView& view, ir::OpId id) {
  const ir::Op& op = view.op(id);
  const auto rank = static_cast<int64_t>(view.shape(op.inputs[0]).size());
  if (ir::attr_int(op.attributes, "keepdims", 1) != 1) return std::nullopt;
  std::vector<int64_t> axes = ir::attr_ints(op.attributes, "axes");
  if (op.inputs.size() > 1 && op.inputs[1] >= 0) {
    const auto given = view.ints(op.inputs[1]);
    if (!given) return std::nullopt;
    axes = *given;
  }
  if (axes.empty()) {
    const bool reduces_all = ir::attr_int(op.attributes, "noop_with_empty_axes", 0) == 0;
    return reduces_all && rank > 0 ? std::optional<int64_t>(0) : std::nullopt;
  }
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] != rank - static_cast<int64_t>(axes.size() - i)) return std::nullopt;
  }
  return axes.front();
}

// Sub(X, mean) for the given X and mean: its op, or -1.
ir::OpId centered(const PatternView& view, ir::TensorId d, ir::TensorId x, ir::TensorId mean) {
  const ir::OpId sub = view.producer(d, "Sub");
  if (sub < 0 || view.op(sub).inputs != std::vector<ir::TensorId>{x, mean}) return -1;
  return sub;
}

std::optional<Normalized> match_normalized(const PatternView& view, ir::TensorId n) {
  Normalized result;
  const ir::OpId div = view.producer(n, "Div");
  if (div < 0) return std::nullopt;
  const ir::TensorId d = view.op(div).inputs[0];
  const ir::OpId sub = view.producer(d, "Sub");
  if (sub < 0) return std::nullopt;
  result.x = view.op(sub).inputs[0];
  const ir::TensorId mean = view.op(sub).inputs[1];
  const ir::OpId mean_op = view.producer(mean, "ReduceMean");
  if (mean_op < 0 || view.op(mean_op).inputs[0] != result.x) return std::nullopt;
  const ir::OpId sqrt = view.producer(view.op(div).inputs[1], "Sqrt");
  if (sqrt < 0) return std::nullopt;
  const auto add_eps = view.with_scalar(view.op(sqrt).inputs[0], "Add");
  if (!add_eps) return std::nullopt;
  const ir::OpId variance = view.producer(add_eps->other, "ReduceMean");
  if (variance < 0) return std::nullopt;
  // The squared deviation: Pow(D', 2) or Mul(D', D'), D' being D or another Sub(X, mean).
  const ir::TensorId squared = view.op(variance).inputs[0];
  ir::OpId square = -1;
  ir::TensorId deviation = -1;
  if (const auto pow = view.with_scalar(squared, "Pow"); pow && pow->value == 2.0f) {
    square = pow->op;
    deviation = pow->other;
  } else if (const ir::OpId mul = view.producer(squared, "Mul");
             mul >= 0 && view.op(mul).inputs[0] == view.op(mul).inputs[1]) {
    square = mul;
    deviation = view.op(mul).inputs[0];
  }
  const ir::OpId sub2 = centered(view, deviation, result.x, mean);
  if (square < 0 || sub2 < 0) return std::nullopt;
  const auto axis = trailing_axis(view, mean_op);
  if (!axis || trailing_axis(view, variance) != axis || view.shape(n) != view.shape(result.x)) {
    return std::nullopt;
  }
  result.axis = *axis;
  result.epsilon = add_eps->value;
  result.ops = {div, sub, mean_op, sqrt, add_eps->op, variance, square};
  if (sub2 != sub) result.ops.push_back(sub2);
  return result;
}

class LayerNormRule : public FusionRule {
 public:
  std::string name() const override { return "fuse-layer-norm"; }

  // Roots: Add (bias), Mul (scale) or Div (neither).
  std::optional<Fusion> match(const PatternView& view, ir::OpId root) const override {
    const ir::Op& op = view.op(root);
    if (op.type == "Div") return build(view, {root}, op.outputs[0], -1, -1);
    if (op.inputs.size() != 2 || (op.type != "Add" && op.type != "Mul")) return std::nullopt;
    for (size_t i : {size_t{0}, size_t{1}}) {
      const ir::TensorId inner = op.inputs[i];
      const ir::TensorId param = op.inputs[1 - i];
      std::optional<Fusion> fusion;
      if (op.type == "Mul") {
        fusion = build(view, {root}, inner, param, -1);
      } else if (const ir::OpId mul = view.producer(inner, "Mul"); mul >= 0) {
        for (size_t j : {size_t{0}, size_t{1}}) {
          const ir::Op& scaled = view.op(mul);
          if (!fusion)
            fusion = build(view, {root, mul}, scaled.inputs[j], scaled.inputs[1 - j], param);
        }
      } else {
        fusion = build(view, {root}, inner, -1, param);
      }
      if (fusion) return fusion;
    }
    return std::nullopt;
  }

 private:
  // The fusion of N = normalized(X) with the given scale and bias (-1: none).
  static std::optional<Fusion> build(const PatternView& view, std::vector<ir::OpId> matched,
                                     ir::TensorId n, ir::TensorId scale, ir::TensorId bias) {
    const std::optional<Normalized> normalized = match_normalized(view, n);
    if (!normalized) return std::nullopt;
    const ir::Shape& x = view.shape(normalized->x);
    const ir::Shape affine(x.begin() + normalized->axis, x.end());
    const auto fits = [&](ir::TensorId t) {
      if (t < 0) return true;
      const ir::Tensor& tensor = view.graph().tensor(t);
      return tensor.dtype == ir::DType::kFloat32 && broadcasts_to(tensor.shape, affine) &&
             ir::num_elements(tensor.shape) == ir::num_elements(affine);
    };
    if (!fits(scale) || !fits(bias)) return std::nullopt;
    Fusion fusion;
    fusion.matched = std::move(matched);
    fusion.matched.insert(fusion.matched.end(), normalized->ops.begin(), normalized->ops.end());
    fusion.fused.type = "LayerNormalization";
    fusion.fused.inputs = {normalized->x, scale};
    if (bias >= 0) fusion.fused.inputs.push_back(bias);
    fusion.fused.attributes = {{"axis", normalized->axis},
                               {"epsilon", static_cast<double>(normalized->epsilon)}};
    if (scale < 0) {
      ir::Tensor ones;
      ones.name = view.op(fusion.matched.front()).name + "/scale";
      ones.shape = affine;
      ones.role = ir::Role::kConstant;
      const std::vector<float> values(ir::num_elements(affine), 1.0f);
      ones.data.resize(values.size() * sizeof(float));
      std::memcpy(ones.data.data(), values.data(), ones.data.size());
      fusion.new_constants.emplace_back(1, std::move(ones));
    }
    return fusion;
  }
};

}  // namespace

std::unique_ptr<FusionRule> make_layer_norm_rule() { return std::make_unique<LayerNormRule>(); }

}  // namespace piper::planner
