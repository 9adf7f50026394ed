// Expert parallelism over one module per expert (shard with "style": "expert"), as HuggingFace
// Mixtral writes its experts (experts.N, a dropless dispatch: each expert reads the rows NonZero
// found for it, a run-time count). The annotations number each expert's ops with the shard's
// tag, which plan_model moves to the ops' attribute "expert" (planner/annotate.h).
//
// The op graph stays the program every data-parallel replica runs on its own rows. The E experts
// of each MoE layer are spread over each group of D replicas in contiguous blocks, as Megatron
// and DeepSpeed place them: member g keeps experts [g·E/D, (g+1)·E/D). Slot j of a layer is
// expert j's ops (forward, backward and update), whose parameters member g binds to expert
// g·E/D + j's initializers (Tensor::replica_initializers); the other experts' ops go. The rows a
// replica routed to expert g·E/D + j travel to member g by an all-to-all-v whose counts are
// exchanged first (piper.AllToAllV, the dropless dispatch of Megatron and DeepEP), the slot runs
// once on the rows of every member, and its results go back by the inverse exchange
// (piper.AllToAllVReturn); the backward exchanges the gradients the same way. A slot's weight
// gradients then sum the tokens of every replica routed to its expert: they are in no
// data-parallel reduction (Tensor::placed_over_replicas) and are scaled to the replicas' mean, as
// data parallelism averages every other gradient.
#pragma once

#include <cstdint>

#include "planner/directives/directive.h"
#include "planner/ir/op_graph.h"

namespace piper::planner {

// `graph` with its experts spread over groups of `group` replicas. Throws piper::Error naming
// the directive's field or the ONNX node: experts not numbered 0 … E-1 in every layer, E not
// divisible by the group, experts of one layer that differ, or an expert reading or writing a
// per-expert tensor whose rows (dimension 0) are not a run-time count.
ir::OpGraph spread_expert_modules(const ir::OpGraph& graph, int64_t group,
                                  const DirectiveContext& context);

}  // namespace piper::planner
