// Lowering: the physical task DAG -> one plan per rank.
#pragma once

#include <memory>
#include <set>
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

// Symmetric ranks: those whose devices run tasks of the same kinds, passes, microbatches and
// op counts in the same order, as the same member of tensor-parallel groups of the same size
// (ranks that differ only in their data-parallel index or another mesh coordinate). Returns
// each rank's class, numbered from 0 in the order of their lowest rank.
std::vector<int> symmetry_classes(const DagIndex& index);
// Every rank, those of one class next to each other (the classes in order, each from its
// lowest rank): the order in which SymmetricLowering lowers each class once.
std::vector<int> symmetric_order(const std::vector<int>& classes);

// Lowers ranks one after another, each rank of a symmetry class that follows another of its
// class by specialising that one's plan (DESIGN.md: symmetry is exploited, not re-lowered): its
// tensors, buffers, events and memory plan stay, and what follows the rank (the instructions
// of its own tasks, as its transfers and its share of the gradient norm, and of kernels that
// read its replica index, the streams named by its device, its parameter shards and blocks,
// its batch rows, its groups) is emitted again by the code that lowers a rank. The plans are
// those lower() makes, byte for byte: the first plan specialised from each lowering is
// compared with the rank's own lowering, and a class where they differ is lowered rank by
// rank; a rank whose tasks do not correspond one to one with its class's is lowered alone. Not
// thread-safe: one per thread.
class SymmetricLowering {
 public:
  // `classes`: symmetry_classes(index); the three must outlive this object.
  SymmetricLowering(const DagIndex& index, const LowerContext& context,
                    const std::vector<int>& classes);
  ~SymmetricLowering();

  // `rank`'s plan, without its planned timeline, valid until the next call.
  plan::Plan& plan(int rank);

  // Plans lowered from scratch, and plans specialised.
  int lowered() const { return lowered_; }
  int specialised() const { return specialised_; }

 private:
  struct Template;
  const DagIndex& index_;
  const LowerContext& context_;
  const std::vector<int>& classes_;
  std::unique_ptr<Template> template_;
  std::unique_ptr<plan::Plan> alone_;  // a rank lowered apart from its class's plan
  std::set<int> unspecialisable_;      // classes whose plans specialisation does not make
  int lowered_ = 0;
  int specialised_ = 0;
};

}  // namespace piper::planner
