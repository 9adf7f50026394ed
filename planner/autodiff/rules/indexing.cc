// Ops that select elements by index. Gathers scatter their gradient back
// (piper.GatherGrad, piper.GatherElementsGrad); TopK's values do the same
// through its indices. Index, depth and integer outputs carry no gradient.
#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

int64_t normalized_axis(const GradientBuilder& g, int64_t fallback) {
  const auto rank = static_cast<int64_t>(g.input_shape(0).size());
  const int64_t axis = ir::attr_int(g.op().attributes, "axis", fallback);
  const int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank) {
    throw Error("node '" + g.op().name + "' (" + g.op().type + "): axis " + std::to_string(axis) +
                " is out of range for an input of rank " + std::to_string(rank));
  }
  return normalized;
}

// dData = zeros with each slice of dY added at its index (repeated indices accumulate).
void gather_rule(GradientBuilder& g) {
  g.contribute(0, g.emit("piper.GatherGrad", {g.output_gradient(0), g.op().inputs[1]},
                         g.input_shape(0), {{"axis", normalized_axis(g, 0)}}));
}

void gather_elements_rule(GradientBuilder& g) {
  g.contribute(0, g.emit("piper.GatherElementsGrad", {g.output_gradient(0), g.op().inputs[1]},
                         g.input_shape(0), {{"axis", normalized_axis(g, 0)}}));
}

// TopK's values are GatherElements(X, indices): their gradient scatters back the same way.
void top_k_rule(GradientBuilder& g) {
  const ir::TensorId dvalues = g.output_gradient(0);
  if (dvalues < 0) return;  // only the indices are used
  if (g.op().outputs.size() < 2 || g.op().outputs[1] < 0) {
    throw Error("node '" + g.op().name + "' (TopK): the indices output is needed for the gradient");
  }
  g.contribute(0, g.emit("piper.GatherElementsGrad", {dvalues, g.op().outputs[1]}, g.input_shape(0),
                         {{"axis", normalized_axis(g, -1)}}));
}

}  // namespace

void add_indexing_rules(GradientRules& rules) {
  rules["Gather"] = gather_rule;
  rules["GatherElements"] = gather_elements_rule;
  rules["TopK"] = top_k_rule;
  rules["OneHot"] = no_gradient;  // indices and depth are integers; values are constants
  rules["ArgMax"] = no_gradient;
  rules["ArgMin"] = no_gradient;
}

}  // namespace piper::planner
