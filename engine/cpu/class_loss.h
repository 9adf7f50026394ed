// What the class-indexed losses (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss)
// and their gradients share: an input [N, C] or [N, C, d1, ...] viewed as [N, C, D],
// int64 labels [N] or [N, d1, ...], optional per-class weights [C], a reduction and an
// optional ignore_index.
#pragma once

#include <string>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

enum class Reduction { kNone, kSum, kMean };

// How each loss names its tensors in messages, as ONNX does.
struct ClassLossNames {
  std::string input;    // "scores" | "input"
  std::string labels;   // "labels" | "target"
  std::string label;    // one of them: "label" | "target"
  std::string weights;  // "weights" | "weight"
};

struct ClassLossGeometry {
  int64_t n = 0, c = 0, d = 1;
  Reduction reduction = Reduction::kMean;
  bool has_ignore = false;
  int64_t ignore_index = 0;
  const int64_t* labels = nullptr;
  const float* weights = nullptr;  // null: every class weighs 1
  std::string op;
  std::string label_name;

  // The weight of position (i, j)'s label, 0 when ignored; sets *label. Throws for a label
  // outside [0, C) that is not ignore_index.
  float label_weight(int64_t i, int64_t j, int64_t* label) const;
  // The sum of label_weight over every position: the divisor of the mean reduction.
  double weight_sum() const;
};

// Checks dtypes and shapes of the input, the labels and the optional weights (input
// `weights_input`) and reads the attributes; failures name the tensors by `names`.
ClassLossGeometry class_loss_geometry(const KernelArgs& args, const TensorView& input,
                                      const TensorView& labels, size_t weights_input,
                                      const ClassLossNames& names);

// A loss (or its incoming gradient) has the labels' shape for `none`, one element otherwise.
void check_loss_shape(const KernelArgs& args, const ClassLossGeometry& g, const TensorView& loss,
                      const TensorView& labels, const std::string& what);

}  // namespace piper::engine::cpu
