// Lowering: the physical task DAG -> one plan per rank.
#pragma once

#include <string>
#include <vector>

#include "formats/strategy.h"
#include "planner/ir/task_graph.h"
#include "planner/lower/dag_index.h"
#include "planner/lower/memory_plan_cache.h"
#include "schemas/plan.pb.h"

namespace piper::planner {

struct LowerContext {
  std::string plan_id;
  std::string model_path;                          // absolute
  uint64_t model_checksum = 0;                     // formats::fnv1a64 of the model file
  std::vector<plan::ExternalFile> external_files;  // the files of its external data
  int64_t global_batch = 0;
  strategy::Optimizer optimizer;
  // Where symmetric ranks find the memory plan another rank's lowering made (optional).
  MemoryPlanCache* memory_plans = nullptr;
};

// The plan's name for a pass (the planned timeline uses it too).
plan::Pass to_plan(ir::Pass pass);

// The plan of `rank`: its tasks' ops as kernel instructions on their streams
// in topological order, events wherever an edge crosses streams, tensors
// placed by plan_memory, parameters to load, constants, batch inputs and the
// loss terms.
plan::Plan lower(const ir::TaskGraph& graph, int rank, const LowerContext& context);
// The same, from an index of the DAG made once for all its ranks.
plan::Plan lower(const DagIndex& index, int rank, const LowerContext& context);
// The same, made in `into`, an empty message (on an arena, say).
void lower(const DagIndex& index, int rank, const LowerContext& context, plan::Plan& into);

}  // namespace piper::planner
