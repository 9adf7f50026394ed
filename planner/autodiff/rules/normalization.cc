// Softmax, LogSoftmax and LayerNormalization: fused row-wise gradient ops.
#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

// Softmax: dX = Y · (dY − Σ dY·Y); LogSoftmax: dX = dY − exp(Y) · Σ dY (sums along `axis`).
template <const char* kGradOp>
void softmax_rule(GradientBuilder& g) {
  const int64_t axis = ir::attr_int(g.op().attributes, "axis", -1);
  g.contribute(0, g.emit(kGradOp, {g.output_gradient(0), g.op().outputs[0]}, g.input_shape(0),
                         {{"axis", axis}}));
}

constexpr char kSoftmaxGrad[] = "piper.SoftmaxGrad";
constexpr char kLogSoftmaxGrad[] = "piper.LogSoftmaxGrad";

// The forward saves Mean and InvStdDev (added as outputs when the model omits them); the
// gradient op reads them instead of recomputing the statistics.
void layer_normalization_rule(GradientBuilder& g) {
  for (size_t k = 1; k < g.op().outputs.size(); ++k) {
    if (g.output_gradient(k) >= 0) {
      throw Error("node '" + g.op().name +
                  "' (LayerNormalization): training through its Mean or InvStdDev output is not "
                  "supported; only Y may reach the loss");
    }
  }
  const ir::Shape x = g.input_shape(0);
  const auto rank = static_cast<int64_t>(x.size());
  int64_t axis = ir::attr_int(g.op().attributes, "axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) {
    throw Error("node '" + g.op().name + "' (LayerNormalization): axis " +
                std::to_string(ir::attr_int(g.op().attributes, "axis", -1)) +
                " is out of range for an input of rank " + std::to_string(rank));
  }
  ir::Shape stats = x;
  for (int64_t d = axis; d < rank; ++d) stats[d] = 1;
  const ir::TensorId mean = g.ensure_output(1, "Mean", ir::DType::kFloat32, stats);
  const ir::TensorId inv_std = g.ensure_output(2, "InvStdDev", ir::DType::kFloat32, stats);
  std::vector<std::optional<ir::Shape>> shapes(3);
  for (size_t i = 0; i < 3; ++i) {
    if (g.wants(i)) shapes[i] = g.input_shape(i);
  }
  const std::vector<ir::TensorId> grads =
      g.emit_multi("piper.LayerNormalizationGrad",
                   {g.output_gradient(0), g.op().inputs[0], g.op().inputs[1], mean, inv_std},
                   shapes, {{"axis", axis}});
  for (size_t i = 0; i < 3; ++i) {
    if (grads[i] >= 0) g.contribute(i, grads[i]);
  }
}

}  // namespace

void add_normalization_rules(GradientRules& rules) {
  rules["Softmax"] = softmax_rule<kSoftmaxGrad>;
  rules["LogSoftmax"] = softmax_rule<kLogSoftmaxGrad>;
  rules["LayerNormalization"] = layer_normalization_rule;
}

}  // namespace piper::planner
