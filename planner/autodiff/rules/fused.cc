// Piper's fused forward ops (planner/fusion): each differentiates to one fused gradient op.
#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

// Contributes each wanted input's gradient from one multi-output gradient op whose outputs
// are in input order.
void contribute_all(GradientBuilder& g, const std::string& type, std::vector<ir::TensorId> inputs,
                    size_t num_gradients) {
  std::vector<std::optional<ir::Shape>> shapes(num_gradients);
  for (size_t i = 0; i < num_gradients; ++i) {
    if (g.wants(i)) shapes[i] = g.input_shape(i);
  }
  const std::vector<ir::TensorId> grads =
      g.emit_multi(type, std::move(inputs), shapes, g.op().attributes);
  for (size_t i = 0; i < num_gradients; ++i) {
    if (grads[i] >= 0) g.contribute(i, grads[i]);
  }
}

// The forward also writes each query row's softmax maximum and 1 / Σ exp(score − max), so the
// backward recomputes the probabilities block by block exactly as the forward had them. The
// backward reads Y too: Σ_keys dP·P of a row equals dY·Y, which flash-attention kernels (cuDNN's
// included) take from Y instead of from the scores.
void fused_attention_rule(GradientBuilder& g) {
  if (g.wants(3)) {
    throw Error("node '" + g.op().name +
                "' (piper.FusedAttention): the attention mask depends on trained parameters; "
                "Piper differentiates only Q, K and V");
  }
  ir::Shape stats = g.input_shape(0);
  stats.back() = 1;
  const ir::TensorId row_max = g.ensure_output(1, "RowMax", ir::DType::kFloat32, stats);
  const ir::TensorId row_inv_sum = g.ensure_output(2, "RowInvSum", ir::DType::kFloat32, stats);
  const ir::Op& op = g.op();
  contribute_all(g, "piper.FusedAttentionGrad",
                 {g.output_gradient(0), op.inputs[0], op.inputs[1], op.inputs[2],
                  g.has_input(3) ? op.inputs[3] : -1, row_max, row_inv_sum, op.outputs[0]},
                 3);
}

void bias_gelu_rule(GradientBuilder& g) {
  std::vector<ir::TensorId> inputs = {g.output_gradient(0)};
  inputs.insert(inputs.end(), g.op().inputs.begin(), g.op().inputs.end());
  contribute_all(g, "piper.BiasGeluGrad", std::move(inputs), g.op().inputs.size());
}

}  // namespace

void add_fused_rules(GradientRules& rules) {
  rules["piper.FusedAttention"] = fused_attention_rule;
  rules["piper.BiasGelu"] = bias_gelu_rule;
}

}  // namespace piper::planner
