// Vocabulary parallelism (Megatron's VocabParallelEmbedding and vocab_parallel_cross_entropy):
// with an embedding table [V, ...] split along the vocabulary (dimension 0) and logits [N, V]
// split along the classes, the lookup, the cross-entropy and their gradients run on each
// member's block of the vocabulary, never reading the table or the logits whole.
//
// Each rewrite is a program of ONNX and Piper ops over whole tensors that computes exactly what
// the op it replaces computes, written so that the partitioner's placement rules keep every
// vocabulary-sized tensor split: the vocabulary is viewed as [G, V/G] (G the group size), and
// member g's offset g·V/G comes from a whole constant [0, V/G, 2V/G, ...] cut by piper.Shard.
//  - Gather(table S(0), ids): each member looks up the ids in its rows (others read row 0 and
//    are masked to zero) by a GatherND batched over the G blocks, and sums over the blocks: a
//    partial sum. piper.GatherGrad scatters the masked rows into the table gradient's block.
//  - SoftmaxCrossEntropyLoss(logits S(1), labels): the row maximum is the maximum of the
//    members' maxima (an all-gather of [N, G]), Σ exp(x - max) and the target's logit (picked by
//    the member holding it) are partial sums, all-reduced, and loss = log Σ - (x_t - max); the
//    gradient (softmax - onehot) · dL is computed on each member's block.
#pragma once

#include <map>
#include <utility>

#include "planner/ir/op_graph.h"

namespace piper::planner {

// What the rewrite needs of the partitioner that places it (shard.cc's Partitioner).
class PlacingGraph {
 public:
  virtual ~PlacingGraph() = default;
  // The graph placed so far: every tensor read so far has its placement.
  virtual const ir::OpGraph& placed() const = 0;
  // By value: adding tensors moves what a reference would point to.
  virtual ir::Shape whole_shape(ir::TensorId tensor) const = 0;
  virtual int64_t group_size() const = 0;
  // A new tensor, of its whole shape.
  virtual ir::TensorId add_tensor(ir::Tensor tensor) = 0;
  // Places `op` by the placement rules, resharding its inputs where they need it.
  virtual void place_op(ir::Op op) = 0;
  // A whole tensor cut into this member's block along dimension 0 (piper.Shard).
  virtual ir::TensorId member_block(ir::TensorId tensor, const ir::Op& consumer) = 0;
};

class VocabParallel {
 public:
  explicit VocabParallel(PlacingGraph& graph) : graph_(graph) {}

  // Places `op` in its vocabulary-parallel form and returns true when it is a lookup in a table
  // split along the vocabulary, a cross-entropy of logits split along the classes, or the
  // gradient of one such forward op; returns false, placing nothing, otherwise.
  bool rewrite(const ir::Op& op);

  // Which ids select which member's rows: `local` (int64), each id minus the member's first
  // row, `safe` (int64) that or 0 outside the member's rows, `in_range` (bool) whether the
  // id is the member's; each the ids' shape with the G members inserted at `axis`.
  struct MemberIds {
    ir::TensorId local = -1, safe = -1, in_range = -1;
  };
  // What the lookup's gradient reuses of its forward: the index tuples [G, ids..., 1] and the
  // mask [G, ids..., 1, ...] broadcasting over the table's rows.
  struct Lookup {
    ir::TensorId tuples = -1, mask = -1;
  };
  // What the cross-entropy's gradient reuses of its forward.
  struct LossRows {
    ir::TensorId labels = -1;
    MemberIds ids;
    ir::TensorId max = -1;      // [N, 1], the rows' maxima
    ir::TensorId log_sum = -1;  // [N], log Σ exp(x - max)
    ir::TensorId weight = -1;   // [N] float, 0 at ignore_index; -1 without one
    ir::TensorId count = -1;    // [] float, Σ weight; -1 without an ignore_index
  };

 private:
  bool embedding(const ir::Op& op);
  bool embedding_gradient(const ir::Op& op);
  bool cross_entropy(const ir::Op& op);
  bool cross_entropy_gradient(const ir::Op& op);

  PlacingGraph& graph_;
  // By the ids of a rewritten Gather and its table's rows.
  std::map<std::pair<ir::TensorId, int64_t>, Lookup> lookups_;
  std::map<ir::TensorId, LossRows> losses_;  // by the logits of a rewritten loss
};

}  // namespace piper::planner
