// Batch statistics over data-parallel replicas. A mean over the batch's rows that the loss
// reads other than linearly (an MoE load-balancing loss multiplies the fraction of tokens each
// expert receives by its mean router probability, both means over every token; batch
// normalization divides by the batch's variance) differs between replicas, and the mean of
// their losses is not one process's. Each replica then averages the mean with the other
// replicas' (the rows divide equally, so that is the whole batch's mean) and reads the average
// in the forward and backward; the mean's own gradient, 1 / (the replica's rows) per row,
// averaged over the replicas as data parallelism averages every gradient, is one process's.
#pragma once

#include <cstdint>
#include <string>

#include "planner/ir/op_graph.h"

namespace piper::planner {

// With `replicas` > 1, inserts after every forward ReduceMean over the rows of the batch
// (except the loss itself) a piper.AllReduce over the replicas (attribute group "replicas",
// average 1) that every reader of the mean reads instead. Throws piper::Error naming
// `model_path` and the node when there is such a mean and `microbatches` > 1: a mean over the
// whole step's rows cannot be computed ahead of its microbatches (`strategy_source` names the
// strategy that splits them). Does nothing with one replica.
void make_batch_means_global(ir::OpGraph& graph, int64_t replicas, int64_t microbatches,
                             const std::string& model_path, const std::string& strategy_source);

}  // namespace piper::planner
