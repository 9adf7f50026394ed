// The planning of ONNX Einsum that the CPU and CUDA kernels share (engine/cpu/einsum.cc,
// engine/cuda/einsum_ops.cc): the checks of the kernel's tensors and equation, every operand
// as a view over its distinct labels, the index spaces of a strided sum, and the pairwise
// contractions left to right with each one's batch, row, column and contracted labels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "engine/cpu/kernel_registry.h"
#include "engine/runtime/tensor.h"

namespace piper::engine::cpu::einsum {

using Labels = std::vector<int>;
using LabelSizes = std::map<int, int64_t>;

// An operand as a function of its distinct labels: element offset = sum of label * stride.
struct View {
  Labels labels;
  std::vector<int64_t> strides;

  int64_t stride(int label) const {
    const auto at = std::find(labels.begin(), labels.end(), label);
    return at == labels.end() ? 0 : strides[at - labels.begin()];
  }
  bool has(int label) const {
    return std::find(labels.begin(), labels.end(), label) != labels.end();
  }
};

// A contiguous tensor whose dimensions carry `labels` in order.
View contiguous_view(const Labels& labels, const LabelSizes& sizes);

// The number of elements of the labels in `group`.
int64_t extent(const Labels& group, const LabelSizes& sizes);

// dst[dst labels] = src summed over the labels dst lacks (labels of dst must be labels of src),
// as two index spaces: the kept labels in dst's order, and the summed ones in src's order.
struct SumGeometry {
  Shape kept;
  std::vector<int64_t> kept_dst, kept_src;  // strides over `kept`
  Shape summed;
  std::vector<int64_t> summed_src;  // src's strides over `summed`
};
SumGeometry sum_geometry(const View& dst, const View& src, const LabelSizes& sizes);

// A checked Einsum kernel: its labels' sizes, its inputs as views, its (contiguous) output.
struct Operands {
  LabelSizes sizes;
  std::vector<View> inputs;
  View output;
};
// Checks the kernel (float32 tensors, one output, the equation attribute against the shapes)
// and describes it; fails through `args` naming the problem.
Operands check_operands(const KernelArgs& args);

// One pairwise contraction: out[out labels] = sum over the rest of left[...] * right[...].
struct Step {
  View left, right, out;
};
// The contractions of two or more inputs, left to right: each intermediate (contiguous) keeps
// the labels that later operands or the output use, grouped batch, rows, cols, so that its
// product writes it in place.
std::vector<Step> contraction_steps(const Operands& operands);

// The labels of a contraction as a batched product: batch (in both operands and the output),
// m (left only), n (right only), k (contracted: in both, not in the output; left's order).
// With `swapped`, left and right have traded places (C^T = B^T A^T) because the output groups
// its labels batch, n, m; `grouped`: the output's labels are batch, m, n in that order.
struct ContractionLabels {
  Labels batch, m, n, k;
  bool swapped = false;
  bool grouped = false;
};
ContractionLabels contraction_labels(const View& left, const View& right, const View& out);

}  // namespace piper::engine::cpu::einsum
