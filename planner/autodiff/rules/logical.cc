// Comparisons, logical ops, Cast and CastLike: their bool and integer outputs carry no gradient;
// nor does Hardmax's one-hot output.
#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"

namespace piper::planner {
namespace {

// Float to float casts the gradient back to the input's dtype; a cast from or to int64 or bool
// cuts it (such tensors never need a gradient, so autodiff only gets here for float to float).
void cast_rule(GradientBuilder& g) {
  const ir::DType from = g.dtype(g.op().inputs[0]);
  if (!ir::is_float(from) || !ir::is_float(g.dtype(g.op().outputs[0]))) {
    no_gradient(g);
    return;
  }
  g.contribute(0, g.cast(g.output_gradient(0), from));
}

// CastLike(X, like) casts as Cast; `like` gives only its dtype, so it carries no gradient.
void cast_like_rule(GradientBuilder& g) {
  if (g.wants(1)) {
    throw Error("node '" + g.op().name +
                "' (CastLike): input 1 only gives the dtype; the loss cannot depend on its values");
  }
  cast_rule(g);
}

// Hardmax is piecewise constant: its gradient is zero wherever it is defined.
void hardmax_rule(GradientBuilder& g) {
  if (!g.wants(0)) return;
  const ir::Shape shape = g.input_shape(0);
  g.contribute(0, g.emit("ConstantOfShape", {g.constant(shape)}, shape));
}

}  // namespace

void add_logical_rules(GradientRules& rules) {
  rules["Cast"] = cast_rule;
  rules["CastLike"] = cast_like_rule;
  rules["Hardmax"] = hardmax_rule;
  for (const char* type : {"Equal", "Less", "Greater", "Not"}) rules[type] = no_gradient;
  for (const char* type : {"LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}) {
    rules[type] = no_gradient;
  }
}

}  // namespace piper::planner
