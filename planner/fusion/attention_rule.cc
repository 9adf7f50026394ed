// Scaled-dot-product attention: MatMul(Q, Kt) → [scale] → [mask] → Softmax(last axis) →
// MatMul(·, V) becomes piper.FusedAttention(Q, Kt, V[, Mask]), whose kernels never hold the
// whole [..., T, Tk] probability tensor (docs/plan-format.md).
//
// scale: Mul by a scalar constant (either side) or Div by one. mask: Where(Mask, fill, ·) or
// Where(Mask, ·, fill) with a scalar constant fill (PyTorch's masked_fill), or Add of a float
// mask (either side) computed from nothing trained; an Expand'ed mask is read before its
// Expand (HuggingFace expands its causal masks to the batch). The scale may have been computed
// from constants (GPT-2's size(-1) ** 0.5): the pass folds it first, as it removes HF's Dropout
// with ratio 0 and float-to-float Casts around the Softmax. Not fused: a Dropout that drops
// between Softmax and the second MatMul (its mask is keyed by the Dropout node and its
// element of the probabilities, which the fused kernel never holds), a mask or scale in
// another order, operands whose leading dimensions differ (broadcasting).
#include "planner/fusion/fusion.h"

namespace piper::planner {
namespace {

struct Mask {
  ir::TensorId tensor = -1;
  ir::Attributes attributes;
};

class AttentionRule : public FusionRule {
 public:
  std::string name() const override { return "fuse-attention"; }

  std::optional<Fusion> match(const PatternView& view, ir::OpId root) const override {
    const ir::Op& output = view.op(root);
    if (output.type != "MatMul" || output.inputs.size() != 2) return std::nullopt;
    Fusion fusion;
    fusion.matched = {root};
    const ir::TensorId v = output.inputs[1];
    const ir::OpId softmax = view.producer(output.inputs[0], "Softmax");
    if (softmax < 0) return std::nullopt;
    fusion.matched.push_back(softmax);
    const auto rank = static_cast<int64_t>(view.shape(output.inputs[0]).size());
    const int64_t axis = ir::attr_int(view.op(softmax).attributes, "axis", -1);
    if (axis != -1 && axis != rank - 1) return std::nullopt;

    ir::TensorId scores = view.op(softmax).inputs[0];
    const ir::Shape scores_shape = view.shape(scores);
    const std::optional<Mask> mask = match_mask(view, scores, fusion.matched);
    if (!mask) return std::nullopt;
    float scale = 1.0f;
    if (const auto mul = view.with_scalar(scores, "Mul")) {
      fusion.matched.push_back(mul->op);
      scores = mul->other;
      scale = mul->value;
    } else if (const auto div = view.with_scalar(scores, "Div")) {
      fusion.matched.push_back(div->op);
      scores = div->other;
      scale = 1.0f / div->value;
    }
    const ir::OpId logits = view.producer(scores, "MatMul");
    if (logits < 0 || view.shape(scores) != scores_shape) return std::nullopt;
    fusion.matched.push_back(logits);
    const ir::TensorId q = view.op(logits).inputs[0];
    const ir::TensorId kt = view.op(logits).inputs[1];
    if (!supported_shapes(view.shape(q), view.shape(kt), view.shape(v))) return std::nullopt;

    fusion.fused.type = "piper.FusedAttention";
    fusion.fused.inputs = {q, kt, v};
    fusion.fused.attributes = mask->attributes;
    fusion.fused.attributes["scale"] = static_cast<double>(scale);
    if (mask->tensor >= 0) fusion.fused.inputs.push_back(mask->tensor);
    return fusion;
  }

 private:
  // The mask applied to `scores` (tensor -1 when there is none), moving `scores` to the
  // masked op's input; nullopt when `scores` comes from a Where or Add the kernel cannot do.
  static std::optional<Mask> match_mask(const PatternView& view, ir::TensorId& scores,
                                        std::vector<ir::OpId>& matched) {
    Mask mask;
    const ir::Shape& shape = view.shape(scores);
    if (const ir::OpId where = view.producer(scores, "Where"); where >= 0) {
      const ir::Op& op = view.op(where);
      const auto fill_true = view.scalar(op.inputs[1]);
      const auto fill_false = view.scalar(op.inputs[2]);
      if (fill_true.has_value() == fill_false.has_value()) return std::nullopt;
      mask.tensor = op.inputs[0];
      mask.attributes["fill"] = static_cast<double>(fill_true ? *fill_true : *fill_false);
      mask.attributes["fill_if"] = int64_t{fill_true ? 1 : 0};
      scores = op.inputs[fill_true ? 2 : 1];
      matched.push_back(where);
    } else if (const ir::OpId add = view.producer(scores, "Add"); add >= 0) {
      const ir::Op& op = view.op(add);
      const bool first_fixed = view.is_fixed(op.inputs[0]);
      if (first_fixed == view.is_fixed(op.inputs[1])) return std::nullopt;
      mask.tensor = op.inputs[first_fixed ? 0 : 1];
      if (view.graph().tensor(mask.tensor).dtype != ir::DType::kFloat32) return std::nullopt;
      scores = op.inputs[first_fixed ? 1 : 0];
      matched.push_back(add);
    } else {
      return mask;
    }
    for (;;) {
      const ir::OpId expand = view.producer(mask.tensor, "Expand");
      if (expand < 0 || !broadcasts_to(view.shape(view.op(expand).inputs[0]), shape)) break;
      mask.tensor = view.op(expand).inputs[0];
    }
    if (!broadcasts_to(view.shape(mask.tensor), shape)) return std::nullopt;
    return mask;
  }

  // Q [..., T, D], Kt [..., D, Tk], V [..., Tk, Dv] with equal leading dimensions.
  static bool supported_shapes(const ir::Shape& q, const ir::Shape& kt, const ir::Shape& v) {
    const size_t rank = q.size();
    if (rank < 2 || kt.size() != rank || v.size() != rank) return false;
    for (size_t d = 0; d + 2 < rank; ++d) {
      if (kt[d] != q[d] || v[d] != q[d]) return false;
    }
    return q[rank - 1] == kt[rank - 2] && kt[rank - 1] == v[rank - 2];
  }
};

}  // namespace

std::unique_ptr<FusionRule> make_attention_rule() { return std::make_unique<AttentionRule>(); }

}  // namespace piper::planner
