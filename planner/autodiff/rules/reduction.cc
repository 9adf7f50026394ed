// ReduceSum and ReduceMean: the gradient is the output gradient broadcast back;
// ReduceMax routes it to the maxima.
#include <algorithm>
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

void broadcast_back(GradientBuilder& g, const std::vector<int64_t>& axes, bool mean) {
  const ir::Shape shape = g.input_shape(0);
  int64_t count = 1;
  for (int64_t axis : axes) count *= shape[axis];
  const bool keepdims = ir::attr_int(g.op().attributes, "keepdims", 1) != 0;
  ir::Attributes attrs = {{"axes", keepdims ? std::vector<int64_t>{} : axes}};
  if (mean) attrs["scale"] = 1.0 / static_cast<double>(count);
  g.contribute(0, g.emit("piper.BroadcastTo", {g.output_gradient(0)}, shape, std::move(attrs)));
}

void reduce_mean_rule(GradientBuilder& g) {
  broadcast_back(g, reduced_axes(g, ir::attr_ints(g.op().attributes, "axes")), true);
}

void reduce_sum_rule(GradientBuilder& g) {
  // Opset 13+: axes is an (already folded) int64 constant input.
  std::vector<int64_t> given;
  if (g.has_input(1)) given = g.constant_ints(g.op().inputs[1]);
  broadcast_back(g, reduced_axes(g, given), false);
}

// ReduceMax: the gradient goes to the elements equal to their maximum, split evenly among
// ties (as PyTorch's amax). Opset 17 takes axes as an attribute, opset 18 as an input.
void reduce_max_rule(GradientBuilder& g) {
  std::vector<int64_t> given = ir::attr_ints(g.op().attributes, "axes");
  if (g.has_input(1)) given = g.constant_ints(g.op().inputs[1]);
  const std::vector<int64_t> axes = reduced_axes(g, given);
  g.contribute(
      0, g.emit("piper.ReduceMaxGrad", {g.output_gradient(0), g.op().inputs[0], g.op().outputs[0]},
                g.input_shape(0), {{"axes", axes}}));
}

}  // namespace

void add_reduction_rules(GradientRules& rules) {
  rules["ReduceMean"] = reduce_mean_rule;
  rules["ReduceSum"] = reduce_sum_rule;
  rules["ReduceMax"] = reduce_max_rule;
}

}  // namespace piper::planner
