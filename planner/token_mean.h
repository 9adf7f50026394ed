// Class losses over a divided batch. Microbatches and replicas each compute the loss of their
// rows and the step's loss is the mean of theirs: one process's loss when each is a mean over
// the same number of rows. SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss with
// reduction "mean" and an ignore_index divide instead by the number of labelled entries
// (labels other than ignore_index; HF labels use -100 for padding and unmasked tokens), which
// differs between the parts; one process divides the sum over the global batch by the global
// count N. The count comes from the labels, known before the step, so it is computed ahead.
#pragma once

#include <cstdint>
#include <string>

#include "planner/ir/op_graph.h"

namespace piper::planner {

// With the batch divided into `parts` (microbatches x replicas) > 1, rewrites each class loss
// node the loss reads (the loss itself, or a term of it: HF Mixtral adds its load-balancing
// loss) with reduction "mean" and an ignore_index into (the sum of its entries' losses) x
// parts / N, N a float32 scalar input counting the step's labelled entries (ir::LabelCount):
// the mean of the parts' losses, and so every gradient, is then one process's. With `parts` 1
// it does nothing. Throws piper::Error naming `model_path` and the loss node when the loss
// sums over the batch (the parts' mean would divide it by `parts`), weighs classes (the
// divisor would be a sum of weights), reads labels computed in the graph, or reaches the loss
// other than through sums and products with constants or parameters (the parts' mean of a
// function of it is not that function of one process's); `strategy_source` names the strategy
// that divides the batch.
void make_token_means_global(ir::OpGraph& graph, int64_t parts, const std::string& model_path,
                             const std::string& strategy_source);

}  // namespace piper::planner
