// Ops that copy elements between layouts: the gradient is the adjoint copy
// (Concat <-> Slice, Split <-> Concat, Slice -> piper.SliceGrad, Expand ->
// piper.SumTo), masked for Where and Trilu; CumSum's is the reverse scan.
// Range and ConstantOfShape generate values and have no gradient.
#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

int64_t normalized_axis(const GradientBuilder& g, int64_t axis, int64_t rank) {
  const int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank) {
    throw Error("node '" + g.op().name + "' (" + g.op().type + "): axis " + std::to_string(axis) +
                " is out of range for rank " + std::to_string(rank));
  }
  return normalized;
}

// dX_i = dY[..., offset_i : offset_i + size_i, ...] along the axis.
void concat_rule(GradientBuilder& g) {
  const ir::Shape out = g.output_shape(0);
  const int64_t axis = normalized_axis(g, ir::attr_int(g.op().attributes, "axis", 0),
                                       static_cast<int64_t>(out.size()));
  int64_t offset = 0;
  for (size_t i = 0; i < g.op().inputs.size(); ++i) {
    const ir::Shape shape = g.input_shape(i);
    if (g.wants(i)) {
      g.contribute(i, g.emit("Slice",
                             {g.output_gradient(0), g.constant(std::vector<int64_t>{offset}),
                              g.constant(std::vector<int64_t>{offset + shape[axis]}),
                              g.constant(std::vector<int64_t>{axis})},
                             shape));
    }
    offset += shape[axis];
  }
}

// dX = Concat of the output gradients, zeros for outputs no gradient reaches.
void split_rule(GradientBuilder& g) {
  const ir::Shape shape = g.input_shape(0);
  const int64_t axis = normalized_axis(g, ir::attr_int(g.op().attributes, "axis", 0),
                                       static_cast<int64_t>(shape.size()));
  std::vector<ir::TensorId> parts;
  for (size_t i = 0; i < g.op().outputs.size(); ++i) {
    ir::TensorId part = g.output_gradient(i);
    if (part < 0) {
      const ir::Shape part_shape = g.output_shape(i);
      part = g.emit("ConstantOfShape", {g.constant(part_shape)}, part_shape);
    }
    parts.push_back(part);
  }
  g.contribute(0, parts.size() == 1 ? parts[0] : g.emit("Concat", parts, shape, {{"axis", axis}}));
}

// dX = zeros with dY written at the sliced positions. starts, ends, axes and steps must be
// planning-time constants; they are passed on explicit and normalized.
void slice_rule(GradientBuilder& g) {
  const auto rank = static_cast<int64_t>(g.input_shape(0).size());
  const std::vector<int64_t> starts = g.constant_ints(g.op().inputs[1]);
  const std::vector<int64_t> ends = g.constant_ints(g.op().inputs[2]);
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (g.has_input(3)) {
    for (int64_t axis : g.constant_ints(g.op().inputs[3]))
      axes.push_back(normalized_axis(g, axis, rank));
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (g.has_input(4)) steps = g.constant_ints(g.op().inputs[4]);
  g.contribute(0, g.emit("piper.SliceGrad",
                         {g.output_gradient(0), g.constant(starts), g.constant(ends),
                          g.constant(axes), g.constant(steps)},
                         g.input_shape(0)));
}

void expand_rule(GradientBuilder& g) { g.contribute(0, g.sum_to_input(g.output_gradient(0), 0)); }

// dX = SumTo(Where(c, dY, 0)), dY_else = SumTo(Where(c, 0, dY)).
void where_rule(GradientBuilder& g) {
  const ir::TensorId dy = g.output_gradient(0);
  const ir::Shape shape = g.shape(dy);
  const ir::TensorId condition = g.op().inputs[0];
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (!g.wants(i)) continue;
    const ir::TensorId zero = g.constant(0.0f);
    const ir::TensorId masked =
        g.emit("Where",
               i == 1 ? std::vector{condition, dy, zero} : std::vector{condition, zero, dy}, shape);
    g.contribute(i, g.sum_to_input(masked, i));
  }
}

// Trilu is a mask: dX = Trilu(dY) with the same k and upper.
void trilu_rule(GradientBuilder& g) {
  std::vector<ir::TensorId> inputs = {g.output_gradient(0)};
  if (g.has_input(1)) inputs.push_back(g.op().inputs[1]);
  g.contribute(0, g.emit("Trilu", inputs, g.input_shape(0), g.op().attributes));
}

// y_j = sum over i <= j (or < j, exclusive) of x_i, so dx_i = sum over j >= i (> i) of dy_j:
// the same scan, reversed.
void cum_sum_rule(GradientBuilder& g) {
  ir::Attributes attributes = g.op().attributes;
  attributes["reverse"] = int64_t{ir::attr_int(attributes, "reverse", 0) == 0 ? 1 : 0};
  g.contribute(0, g.emit("CumSum", {g.output_gradient(0), g.op().inputs[1]}, g.input_shape(0),
                         std::move(attributes)));
}

}  // namespace

void add_layout_rules(GradientRules& rules) {
  rules["Concat"] = concat_rule;
  rules["Split"] = split_rule;
  rules["Slice"] = slice_rule;
  rules["Expand"] = expand_rule;
  rules["Where"] = where_rule;
  rules["Trilu"] = trilu_rule;
  rules["CumSum"] = cum_sum_rule;
  rules["Range"] = no_gradient;
  rules["ConstantOfShape"] = no_gradient;
}

}  // namespace piper::planner
