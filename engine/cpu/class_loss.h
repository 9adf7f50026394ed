// What the class-indexed losses (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss)
// and their gradients share: an input [N, C] or [N, C, d1, ...] viewed as [N, C, D],
// int64 labels [N] or [N, d1, ...], optional per-class weights [C], a reduction and an
// optional ignore_index.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/parallel.h"

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
  // The message of label_weight's failure for `label` at flat position `position` (i · D + j).
  std::string bad_label(int64_t label, int64_t position) const;
  // The sum of label_weight over every position: the divisor of the mean reduction.
  double weight_sum() const;
};

// Positions (i, j) per block of sum_positions.
constexpr int64_t kPositionsPerBlock = 64;

// Calls f(i, j, scratch) for every position (i in [0, N), j in [0, D)), positions spread over
// parallel.h's threads; f touches about C elements per call, and scratch holds C floats for
// its own use.
template <typename F>
void for_each_position(const ClassLossGeometry& g, F f) {
  parallel_for(g.n * g.d, (kParallelGrain + g.c - 1) / std::max<int64_t>(g.c, 1),
               [&](int64_t begin, int64_t end) {
                 std::vector<float> scratch(static_cast<size_t>(g.c));
                 for (int64_t p = begin; p < end; ++p) f(p / g.d, p % g.d, scratch.data());
               });
}

struct LossSums {
  double loss = 0.0;
  double weight = 0.0;
};

// Sums f(i, j, &weight, scratch) and the weights it reports over every position (scratch as in
// for_each_position), in parallel: each block of kPositionsPerBlock positions sums its own, and
// the blocks' sums are added in order, so the result does not depend on the thread count.
template <typename F>
LossSums sum_positions(const ClassLossGeometry& g, F f) {
  const int64_t positions = g.n * g.d;
  const int64_t blocks = (positions + kPositionsPerBlock - 1) / kPositionsPerBlock;
  std::vector<LossSums> parts(static_cast<size_t>(blocks));
  const int64_t block_work = kPositionsPerBlock * std::max<int64_t>(g.c, 1);
  parallel_for(blocks, (kParallelGrain + block_work - 1) / block_work,
               [&](int64_t begin, int64_t end) {
                 std::vector<float> scratch(static_cast<size_t>(g.c));
                 for (int64_t b = begin; b < end; ++b) {
                   LossSums& part = parts[static_cast<size_t>(b)];
                   const int64_t last = std::min(positions, (b + 1) * kPositionsPerBlock);
                   for (int64_t p = b * kPositionsPerBlock; p < last; ++p) {
                     double weight = 0.0;
                     part.loss += f(p / g.d, p % g.d, &weight, scratch.data());
                     part.weight += weight;
                   }
                 }
               });
  LossSums total;
  for (const LossSums& part : parts) {
    total.loss += part.loss;
    total.weight += part.weight;
  }
  return total;
}

// Checks dtypes and shapes of the input, the labels and the optional weights (input
// `weights_input`) and reads the attributes; failures name the tensors by `names`.
ClassLossGeometry class_loss_geometry(const KernelArgs& args, const TensorView& input,
                                      const TensorView& labels, size_t weights_input,
                                      const ClassLossNames& names);

// A loss (or its incoming gradient) has the labels' shape for `none`, one element otherwise.
void check_loss_shape(const KernelArgs& args, const ClassLossGeometry& g, const TensorView& loss,
                      const TensorView& labels, const std::string& what);

}  // namespace piper::engine::cpu
