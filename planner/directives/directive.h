// A directive is one transformation of the task DAG, applied in strategy-file
// order. Each lives in its own file; this table maps "op" to it.
#pragma once

#include <string>

#include "formats/strategy.h"
#include "planner/ir/task_graph.h"

namespace piper::planner {

struct DirectiveContext {
  const strategy::Directive& directive;
  const std::string& source;  // the strategy file, for messages
  // Whether a directive that moves tasks between devices routes the DAG's transfers after it
  // (route_transfers). Routing rebuilds every transfer from the compute tasks, so a replicate
  // followed by another may leave it to that one when nothing verifies the DAG in between
  // (piper-plan --no-verify): a large pipeline replicates each of its stages in turn.
  bool route_transfers = true;

  // "strategy.json: $.directives[2] (place): <what>", for errors.
  std::string where(const std::string& field = "") const;
};

using DirectivePass = void (*)(ir::TaskGraph& graph, const DirectiveContext& context);

// Throws piper::Error naming the directive when its op is not implemented yet.
DirectivePass directive_pass(const DirectiveContext& context);

// Individual directives, one file each.
void apply_place(ir::TaskGraph& graph, const DirectiveContext& context);
void apply_split(ir::TaskGraph& graph, const DirectiveContext& context);
void apply_replicate(ir::TaskGraph& graph, const DirectiveContext& context);
void apply_recompute(ir::TaskGraph& graph, const DirectiveContext& context);
void apply_order(ir::TaskGraph& graph, const DirectiveContext& context);
void apply_shard(ir::TaskGraph& graph, const DirectiveContext& context);

// The strategy as the planner applies it: a shard directive (at most one) first, since it
// decides the program every member of a group runs, and every device the other directives
// name replaced by the index of the tensor-parallel group it leads (TaskGraph::shard_groups).
// Unchanged without a shard directive. Throws piper::Error naming a directive that names a
// device which leads no group.
strategy::Strategy on_shard_groups(const strategy::Strategy& strategy);

// Whether a task is selected by a filter (tags, microbatch, pass).
bool selects(const strategy::Filter& filter, const ir::Task& task);

}  // namespace piper::planner
