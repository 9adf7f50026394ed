#include "engine/cpu/class_loss.h"

#include "formats/error.h"

namespace piper::engine::cpu {

float ClassLossGeometry::label_weight(int64_t i, int64_t j, int64_t* label) const {
  *label = labels[i * d + j];
  if (has_ignore && *label == ignore_index) return 0.0f;
  if (*label < 0 || *label >= c) throw Error(bad_label(*label, i * d + j));
  return weights ? weights[*label] : 1.0f;
}

std::string ClassLossGeometry::bad_label(int64_t label, int64_t position) const {
  return op + ": " + label_name + " " + std::to_string(label) + " at position " +
         std::to_string(position) + " is outside the " + std::to_string(c) + " classes [0, " +
         std::to_string(c) + ")" +
         (has_ignore ? " and is not ignore_index " + std::to_string(ignore_index) : "") +
         "; check the " + label_name + " data";
}

double ClassLossGeometry::weight_sum() const {
  double sum = 0.0;
  int64_t label = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) sum += label_weight(i, j, &label);
  }
  return sum;
}

ClassLossGeometry class_loss_geometry(const KernelArgs& args, const TensorView& input,
                                      const TensorView& labels, size_t weights_input,
                                      const ClassLossNames& names) {
  args.expect_dtype(input, plan::FLOAT32, names.input);
  args.expect_dtype(labels, plan::INT64, names.labels);
  if (input.rank() < 2) {
    args.fail(names.input + " must be [N, C] or [N, C, d1, ...], got " + shape_string(input.shape));
  }
  Shape expected = {input.shape[0]};
  expected.insert(expected.end(), input.shape.begin() + 2, input.shape.end());
  if (labels.shape != expected) {
    args.fail(names.labels + " of shape " + shape_string(labels.shape) + " do not fit " +
              names.input + " " + shape_string(input.shape) + ", which needs " + names.labels +
              " of shape " + shape_string(expected));
  }
  ClassLossGeometry g;
  g.op = args.op();
  g.label_name = names.label;
  g.n = input.shape[0];
  g.c = input.shape[1];
  g.d = product(input.shape, 2, input.shape.size());
  const std::string reduction = args.attributes().get_string("reduction", "mean");
  if (reduction == "none") {
    g.reduction = Reduction::kNone;
  } else if (reduction == "sum") {
    g.reduction = Reduction::kSum;
  } else if (reduction == "mean") {
    g.reduction = Reduction::kMean;
  } else {
    args.fail("reduction '" + reduction + "' is not one of none, sum, mean");
  }
  g.has_ignore = args.attributes().has("ignore_index");
  g.ignore_index = args.attributes().get_int("ignore_index", 0);
  g.labels = labels.as<const int64_t>();
  if (args.has_input(weights_input)) {
    const TensorView& w = args.input(weights_input);
    args.expect_dtype(w, plan::FLOAT32, names.weights);
    if (w.shape != Shape{g.c}) {
      args.fail(names.weights + " of shape " + shape_string(w.shape) + " should be [" +
                std::to_string(g.c) + "] (one per class)");
    }
    g.weights = w.as<const float>();
  }
  return g;
}

void check_loss_shape(const KernelArgs& args, const ClassLossGeometry& g, const TensorView& loss,
                      const TensorView& labels, const std::string& what) {
  args.expect_dtype(loss, plan::FLOAT32, what);
  if (g.reduction == Reduction::kNone ? loss.shape != labels.shape : loss.elements() != 1) {
    args.fail(what + " has shape " + shape_string(loss.shape) + ", expected " +
              (g.reduction == Reduction::kNone ? shape_string(labels.shape) : "[] (a scalar)"));
  }
}

}  // namespace piper::engine::cpu
