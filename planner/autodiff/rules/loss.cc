// Losses: the gradient flows to the scores only.
#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

void softmax_cross_entropy_rule(GradientBuilder& g) {
  if (g.op().outputs.size() > 1 && g.output_gradient(1) >= 0) {
    throw Error("node '" + g.op().name +
                "' (SoftmaxCrossEntropyLoss): training through its log_prob output is not "
                "implemented yet");
  }
  std::vector<ir::TensorId> inputs = {g.output_gradient(0), g.op().inputs[0], g.op().inputs[1]};
  if (g.has_input(2)) inputs.push_back(g.op().inputs[2]);
  g.contribute(
      0, g.emit("piper.SoftmaxCrossEntropyLossGrad", inputs, g.input_shape(0), g.op().attributes));
}

// The gradient flows to the input (log probabilities) only; class weights are constants.
void negative_log_likelihood_rule(GradientBuilder& g) {
  std::vector<ir::TensorId> inputs = {g.output_gradient(0), g.op().inputs[0], g.op().inputs[1]};
  if (g.has_input(2)) inputs.push_back(g.op().inputs[2]);
  g.contribute(0, g.emit("piper.NegativeLogLikelihoodLossGrad", inputs, g.input_shape(0),
                         g.op().attributes));
}

}  // namespace

void add_loss_rules(GradientRules& rules) {
  rules["SoftmaxCrossEntropyLoss"] = softmax_cross_entropy_rule;
  rules["NegativeLogLikelihoodLoss"] = negative_log_likelihood_rule;
}

}  // namespace piper::planner
