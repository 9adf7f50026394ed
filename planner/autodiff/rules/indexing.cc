// Ops that select elements by index. Gathers scatter their gradient back
// (piper.GatherGrad, piper.GatherElementsGrad, piper.GatherNDGrad); TopK's values
// do the same through its indices. Scatters gather it (ScatterND <-> GatherND,
// ScatterElements <-> GatherElements), and Tile sums its tiles. Index, depth and
// integer outputs carry no gradient.
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

// dData = dY with the positions the updates overwrote zeroed (reduction none: a scatter of
// zeros), or dY itself (add); dUpdates = dY gathered where each update landed. With repeated
// indices and reduction none every update gets the gradient of the element it was written to,
// as PyTorch's index_put_ and scatter_ give. `gather` is the scatter's matching gather; an
// axis in `attributes` goes to both.
void scatter_rule(GradientBuilder& g, const std::string& gather, const ir::Attributes& attributes) {
  const std::string reduction = ir::attr_string(g.op().attributes, "reduction", "none");
  if (reduction != "none" && reduction != "add") {
    throw Error("node '" + g.op().name + "' (" + g.op().type + "): Piper has no gradient for " +
                "reduction '" + reduction + "' (only none and add)");
  }
  const ir::TensorId dy = g.output_gradient(0);
  const ir::TensorId indices = g.op().inputs[1];
  if (g.wants(0) && reduction == "add") g.contribute(0, dy);
  if (g.wants(0) && reduction == "none") {
    const ir::Shape updates = g.input_shape(2);
    const ir::TensorId zeros =
        g.cast(g.emit("ConstantOfShape", {g.constant(updates)}, updates), g.dtype(dy));
    g.contribute(0, g.emit(g.op().type, {dy, indices, zeros}, g.input_shape(0), attributes));
  }
  if (g.wants(2)) g.contribute(2, g.emit(gather, {dy, indices}, g.input_shape(2), attributes));
}

void scatter_nd_rule(GradientBuilder& g) { scatter_rule(g, "GatherND", {}); }

void scatter_elements_rule(GradientBuilder& g) {
  scatter_rule(g, "GatherElements", {{"axis", normalized_axis(g, 0)}});
}

void gather_nd_rule(GradientBuilder& g) {
  g.contribute(
      0, g.emit("piper.GatherNDGrad", {g.output_gradient(0), g.op().inputs[1]}, g.input_shape(0),
                {{"batch_dims", ir::attr_int(g.op().attributes, "batch_dims", 0)}}));
}

// Y holds r_d copies of X along each dimension d: dX sums them, as dY seen as
// [r0, d0, r1, d1, ...] summed over the repeats.
void tile_rule(GradientBuilder& g) {
  const ir::Shape x = g.input_shape(0), y = g.output_shape(0);
  ir::Shape tiles;
  std::vector<int64_t> repeat_axes;
  bool repeated = false;
  for (size_t d = 0; d < x.size(); ++d) {
    const int64_t repeats = x[d] == 0 ? 1 : y[d] / x[d];
    repeated = repeated || repeats != 1;
    tiles.push_back(repeats);
    tiles.push_back(x[d]);
    repeat_axes.push_back(static_cast<int64_t>(2 * d));
  }
  const ir::TensorId dy = g.output_gradient(0);
  if (!repeated) return g.contribute(0, dy);
  const ir::TensorId split = g.emit("Reshape", {dy, g.constant(tiles)}, tiles);
  g.contribute(0, g.emit("ReduceSum", {split, g.constant(repeat_axes)}, x, {{"keepdims", 0}}));
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
  rules["GatherND"] = gather_nd_rule;
  rules["ScatterND"] = scatter_nd_rule;
  rules["ScatterElements"] = scatter_elements_rule;
  rules["Tile"] = tile_rule;
  rules["NonZero"] = no_gradient;  // integer indices and count
  rules["OneHot"] = no_gradient;   // indices and depth are integers; values are constants
  rules["ArgMax"] = no_gradient;
  rules["ArgMin"] = no_gradient;
}

}  // namespace piper::planner
