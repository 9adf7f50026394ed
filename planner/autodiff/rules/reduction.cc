// ReduceSum and ReduceMean: the gradient is the output gradient broadcast back;
// ReduceMax and ReduceMin route it to the extrema; ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSum and ReduceLogSumExp scale it by their derivatives.
#include <algorithm>
#include <cfloat>
#include <cstring>

#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

// The reduced axes, normalised and sorted; all axes when none are given
// (unless noop_with_empty_axes, when nothing is reduced).
std::vector<int64_t> reduced_axes(const GradientBuilder& g, const std::vector<int64_t>& given) {
  const auto rank = static_cast<int64_t>(g.input_shape(0).size());
  std::vector<int64_t> axes;
  if (given.empty()) {
    if (ir::attr_int(g.op().attributes, "noop_with_empty_axes", 0) == 0) {
      for (int64_t axis = 0; axis < rank; ++axis) axes.push_back(axis);
    }
    return axes;
  }
  for (int64_t axis : given) axes.push_back(axis < 0 ? axis + rank : axis);
  std::sort(axes.begin(), axes.end());
  return axes;
}

// The axes an opset 13-17 attribute or an opset 18 input gives (ReduceSum: input only).
std::vector<int64_t> given_axes(const GradientBuilder& g) {
  if (g.has_input(1)) return g.constant_ints(g.op().inputs[1]);
  return ir::attr_ints(g.op().attributes, "axes");
}

// `tensor`, of the forward output's shape, broadcast back to the input's shape (times scale).
ir::TensorId broadcast_back(GradientBuilder& g, ir::TensorId tensor,
                            const std::vector<int64_t>& axes, double scale = 1.0) {
  const bool keepdims = ir::attr_int(g.op().attributes, "keepdims", 1) != 0;
  ir::Attributes attrs = {{"axes", keepdims ? std::vector<int64_t>{} : axes}};
  if (scale != 1.0) attrs["scale"] = scale;
  return g.emit("piper.BroadcastTo", {tensor}, g.input_shape(0), std::move(attrs));
}

void reduce_mean_rule(GradientBuilder& g) {
  const std::vector<int64_t> axes = reduced_axes(g, given_axes(g));
  int64_t count = 1;
  for (int64_t axis : axes) count *= g.input_shape(0)[axis];
  g.contribute(0, broadcast_back(g, g.output_gradient(0), axes, 1.0 / static_cast<double>(count)));
}

void reduce_sum_rule(GradientBuilder& g) {
  g.contribute(0, broadcast_back(g, g.output_gradient(0), reduced_axes(g, given_axes(g))));
}

// ReduceMax and ReduceMin: the gradient goes to the elements equal to their extremum, split
// evenly among ties (as PyTorch's amax and amin).
void reduce_extremum_rule(GradientBuilder& g) {
  const std::vector<int64_t> axes = reduced_axes(g, given_axes(g));
  g.contribute(
      0, g.emit("piper.ReduceMaxGrad", {g.output_gradient(0), g.op().inputs[0], g.op().outputs[0]},
                g.input_shape(0), {{"axes", axes}}));
}

// ReduceProd: dX = dY · (the product of the group's other elements), zeros included.
void reduce_prod_rule(GradientBuilder& g) {
  const std::vector<int64_t> axes = reduced_axes(g, given_axes(g));
  g.contribute(0, g.emit("piper.ReduceProdGrad", {g.output_gradient(0), g.op().inputs[0]},
                         g.input_shape(0), {{"axes", axes}}));
}

// ReduceL1: dX = dY · sign(X) (0 at 0, as PyTorch's norm).
void reduce_l1_rule(GradientBuilder& g) {
  const ir::TensorId dy = broadcast_back(g, g.output_gradient(0), reduced_axes(g, given_axes(g)));
  g.contribute(0, g.emit("piper.AbsGrad", {dy, g.op().inputs[0]}, g.input_shape(0)));
}

// ReduceSumSquare: dX = 2 · dY · X.
void reduce_sum_square_rule(GradientBuilder& g) {
  const auto axes = reduced_axes(g, given_axes(g));
  const ir::TensorId dy = broadcast_back(g, g.output_gradient(0), axes, 2.0);
  g.contribute(0, g.emit("Mul", {dy, g.op().inputs[0]}, g.input_shape(0)));
}

// ReduceL2: dX = dY · X / Y, 0 where Y = 0 (then X = 0 too: the norm's subgradient, as
// PyTorch's): Y is divided by as max(Y, FLT_MIN), which changes only denormal norms.
void reduce_l2_rule(GradientBuilder& g) {
  const ir::Shape out = g.output_shape(0);
  const ir::TensorId norm = g.emit("Max", {g.op().outputs[0], g.constant(FLT_MIN)}, out);
  const ir::TensorId ratio = g.emit("Div", {g.output_gradient(0), norm}, out);
  const ir::TensorId dy = broadcast_back(g, ratio, reduced_axes(g, given_axes(g)));
  g.contribute(0, g.emit("Mul", {dy, g.op().inputs[0]}, g.input_shape(0)));
}

// ReduceLogSum: Y = log S, dX = dY / S = dY / e^Y.
void reduce_log_sum_rule(GradientBuilder& g) {
  const ir::Shape out = g.output_shape(0);
  const ir::TensorId sum = g.emit("Exp", {g.op().outputs[0]}, out);
  const ir::TensorId ratio = g.emit("Div", {g.output_gradient(0), sum}, out);
  g.contribute(0, broadcast_back(g, ratio, reduced_axes(g, given_axes(g))));
}

// ReduceLogSumExp: dX = dY · e^(X − Y), the softmax of X over its group.
void reduce_log_sum_exp_rule(GradientBuilder& g) {
  const ir::Shape shape = g.input_shape(0);
  const std::vector<int64_t> axes = reduced_axes(g, given_axes(g));
  const ir::TensorId y = broadcast_back(g, g.op().outputs[0], axes);
  const ir::TensorId shifted = g.emit("Sub", {g.op().inputs[0], y}, shape);
  const ir::TensorId softmax = g.emit("Exp", {shifted}, shape);
  const ir::TensorId dy = broadcast_back(g, g.output_gradient(0), axes);
  g.contribute(0, g.emit("Mul", {dy, softmax}, shape));
}

}  // namespace

void add_reduction_rules(GradientRules& rules) {
  rules["ReduceMean"] = reduce_mean_rule;
  rules["ReduceSum"] = reduce_sum_rule;
  rules["ReduceMax"] = reduce_extremum_rule;
  rules["ReduceMin"] = reduce_extremum_rule;
  rules["ReduceProd"] = reduce_prod_rule;
  rules["ReduceL1"] = reduce_l1_rule;
  rules["ReduceL2"] = reduce_l2_rule;
  rules["ReduceSumSquare"] = reduce_sum_square_rule;
  rules["ReduceLogSum"] = reduce_log_sum_rule;
  rules["ReduceLogSumExp"] = reduce_log_sum_exp_rule;
}

}  // namespace piper::planner
