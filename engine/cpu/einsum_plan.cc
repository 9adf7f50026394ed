#include "engine/cpu/einsum_plan.h"

#include <set>
#include <string>
#include <utility>

#include "engine/cpu/strided_loop.h"
#include "formats/einsum.h"
#include "formats/error.h"

namespace piper::engine::cpu::einsum {
namespace {

// The labels' sizes from the operands (a size-1 dimension broadcasts against a larger one).
LabelSizes label_sizes(const KernelArgs& args, const formats::EinsumEquation& equation) {
  LabelSizes sizes;
  for (size_t i = 0; i < equation.inputs.size(); ++i) {
    const Shape& shape = args.input(i).shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int label = equation.inputs[i][d];
      auto [at, inserted] = sizes.emplace(label, shape[d]);
      if (inserted || at->second == shape[d] || shape[d] == 1) continue;
      if (at->second == 1) {
        at->second = shape[d];
        continue;
      }
      args.fail("operand " + std::to_string(i) + " " + shape_string(shape) + " gives dimension " +
                std::to_string(d) + " size " + std::to_string(shape[d]) +
                " but the same label has size " + std::to_string(at->second) +
                " elsewhere in the equation");
    }
  }
  return sizes;
}

// Operand `labels` (one per dimension) of `shape` as a view: repeated labels (a diagonal) add
// their strides, broadcast dimensions get stride 0.
View operand_view(const Labels& labels, const Shape& shape) {
  const std::vector<int64_t> strides = contiguous_strides(shape);
  View view;
  for (size_t d = 0; d < labels.size(); ++d) {
    const int64_t stride = shape[d] == 1 ? 0 : strides[d];
    const auto at = std::find(view.labels.begin(), view.labels.end(), labels[d]);
    if (at == view.labels.end()) {
      view.labels.push_back(labels[d]);
      view.strides.push_back(stride);
    } else {
      view.strides[at - view.labels.begin()] += stride;
    }
  }
  return view;
}

}  // namespace

View contiguous_view(const Labels& labels, const LabelSizes& sizes) {
  Shape shape;
  for (int label : labels) shape.push_back(sizes.at(label));
  return {labels, contiguous_strides(shape)};
}

int64_t extent(const Labels& group, const LabelSizes& sizes) {
  int64_t n = 1;
  for (int label : group) n *= sizes.at(label);
  return n;
}

SumGeometry sum_geometry(const View& dst, const View& src, const LabelSizes& sizes) {
  SumGeometry geometry;
  for (int label : dst.labels) {
    geometry.kept.push_back(sizes.at(label));
    geometry.kept_dst.push_back(dst.stride(label));
    geometry.kept_src.push_back(src.stride(label));
  }
  for (int label : src.labels) {
    if (dst.has(label)) continue;
    geometry.summed.push_back(sizes.at(label));
    geometry.summed_src.push_back(src.stride(label));
  }
  return geometry;
}

Operands check_operands(const KernelArgs& args) {
  if (args.num_inputs() < 1) args.fail("takes at least one input, the plan gives none");
  args.expect_outputs(1, 1);
  const TensorView& y = args.output(0);
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  std::vector<size_t> ranks;
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    args.expect_dtype(args.input(i), plan::FLOAT32, "input " + std::to_string(i));
    ranks.push_back(static_cast<size_t>(args.input(i).rank()));
  }
  if (!args.attributes().has("equation")) args.fail("attribute 'equation' is required");
  formats::EinsumEquation equation;
  try {
    equation = formats::parse_einsum(args.attributes().get_string("equation", ""), ranks);
  } catch (const Error& error) {
    args.fail(error.what());
  }
  Operands operands;
  operands.sizes = label_sizes(args, equation);
  Shape expected;
  for (int label : equation.output) expected.push_back(operands.sizes.at(label));
  if (expected != y.shape) {
    args.fail("equation '" + args.attributes().get_string("equation", "") + "' gives shape " +
              shape_string(expected) + " but the output has shape " + shape_string(y.shape));
  }
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    operands.inputs.push_back(operand_view(equation.inputs[i], args.input(i).shape));
  }
  operands.output = contiguous_view(equation.output, operands.sizes);
  return operands;
}

std::vector<Step> contraction_steps(const Operands& operands) {
  const std::vector<View>& views = operands.inputs;
  std::vector<Step> steps;
  View left = views[0];
  for (size_t i = 1; i < views.size(); ++i) {
    const View& right = views[i];
    if (i + 1 == views.size()) {
      steps.push_back({left, right, operands.output});
      break;
    }
    std::set<int> later(operands.output.labels.begin(), operands.output.labels.end());
    for (size_t j = i + 1; j < views.size(); ++j)
      later.insert(views[j].labels.begin(), views[j].labels.end());
    Labels batch, rows, cols;
    for (int label : left.labels) {
      if (!later.count(label)) continue;
      (right.has(label) ? batch : rows).push_back(label);
    }
    for (int label : right.labels) {
      if (later.count(label) && !left.has(label)) cols.push_back(label);
    }
    Labels kept = batch;
    kept.insert(kept.end(), rows.begin(), rows.end());
    kept.insert(kept.end(), cols.begin(), cols.end());
    const View next = contiguous_view(kept, operands.sizes);
    steps.push_back({left, right, next});
    left = next;
  }
  return steps;
}

ContractionLabels contraction_labels(const View& left, const View& right, const View& out) {
  ContractionLabels labels;
  for (int label : out.labels) {
    const bool in_l = left.has(label), in_r = right.has(label);
    (in_l && in_r ? labels.batch : in_l ? labels.m : labels.n).push_back(label);
  }
  for (int label : left.labels) {
    if (right.has(label) && !out.has(label)) labels.k.push_back(label);
  }
  const auto grouping = [&](const Labels& rows, const Labels& cols) {
    Labels expected = labels.batch;
    expected.insert(expected.end(), rows.begin(), rows.end());
    expected.insert(expected.end(), cols.begin(), cols.end());
    return expected == out.labels;
  };
  labels.grouped = grouping(labels.m, labels.n);
  if (!labels.grouped && grouping(labels.n, labels.m)) {
    std::swap(labels.m, labels.n);
    labels.grouped = true;
    labels.swapped = true;
  }
  return labels;
}

}  // namespace piper::engine::cpu::einsum
