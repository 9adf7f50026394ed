// Einsum: the gradient of operand i is an einsum of the output gradient with
// the other operands, producing operand i's labels ("bhqd,bhkd->bhqk" gives
// dA = "bhqk,bhkd->bhqd"(dY, B)). Labels only operand i carries were summed
// in the forward pass, so their gradient is broadcast back (piper.BroadcastTo);
// dimensions the forward broadcast from size 1 are summed back (piper.SumTo).
#include "formats/einsum.h"

#include <algorithm>
#include <map>

#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

std::string equation_attribute(const ir::Op& op) {
  const auto found = op.attributes.find("equation");
  const std::string* text =
      found == op.attributes.end() ? nullptr : std::get_if<std::string>(&found->second);
  if (text == nullptr) {
    throw Error("node '" + op.name + "' (Einsum): the string attribute 'equation' is missing");
  }
  return *text;
}

void einsum_rule(GradientBuilder& g) {
  const ir::Op& op = g.op();
  const std::string text = equation_attribute(op);
  std::vector<size_t> ranks;
  for (size_t i = 0; i < op.inputs.size(); ++i) ranks.push_back(g.input_shape(i).size());
  formats::EinsumEquation equation;
  try {
    equation = formats::parse_einsum(text, ranks);
  } catch (const Error& error) {
    throw Error("node '" + op.name + "' (Einsum): " + error.what());
  }
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const ir::Shape shape = g.input_shape(i);
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t& size = sizes[equation.inputs[i][d]];
      size = std::max(size, shape[d]);
    }
  }
  const ir::TensorId dy = g.output_gradient(0);
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (!g.wants(i)) continue;
    const std::vector<int>& labels = equation.inputs[i];
    for (size_t d = 0; d < labels.size(); ++d) {
      if (std::count(labels.begin(), labels.end(), labels[d]) > 1) {
        throw Error("node '" + op.name + "' (Einsum): equation '" + text + "' takes a diagonal " +
                    "of operand " + std::to_string(i) +
                    " (a label repeated within it); its gradient is not implemented");
      }
    }
    // The gradient einsum: dY and every other operand in, operand i's surviving labels out.
    formats::EinsumEquation backward;
    backward.inputs.push_back(equation.output);
    std::vector<ir::TensorId> inputs = {dy};
    for (size_t j = 0; j < op.inputs.size(); ++j) {
      if (j == i) continue;
      backward.inputs.push_back(equation.inputs[j]);
      inputs.push_back(op.inputs[j]);
    }
    const auto available = [&](int label) {
      return std::any_of(backward.inputs.begin(), backward.inputs.end(), [&](const auto& term) {
        return std::find(term.begin(), term.end(), label) != term.end();
      });
    };
    std::vector<int64_t> dropped_axes;
    ir::Shape kept_shape, full_shape;
    for (size_t d = 0; d < labels.size(); ++d) {
      full_shape.push_back(sizes.at(labels[d]));
      if (available(labels[d])) {
        backward.output.push_back(labels[d]);
        kept_shape.push_back(sizes.at(labels[d]));
      } else {
        dropped_axes.push_back(static_cast<int64_t>(d));
      }
    }
    ir::TensorId gradient = dy;
    if (inputs.size() > 1 || backward.output != equation.output) {
      gradient =
          g.emit("Einsum", inputs, kept_shape, {{"equation", formats::einsum_string(backward)}});
    }
    if (!dropped_axes.empty()) {
      gradient = g.emit("piper.BroadcastTo", {gradient}, full_shape, {{"axes", dropped_axes}});
    }
    g.contribute(i, g.sum_to_input(gradient, i));
  }
}

}  // namespace

void add_einsum_rules(GradientRules& rules) { rules["Einsum"] = einsum_rule; }

}  // namespace piper::planner
