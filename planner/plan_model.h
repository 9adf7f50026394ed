// The planner's whole flow: ONNX model + strategy -> one plan per rank.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/external_data.h"
#include "formats/strategy.h"
#include "planner/import/frozen.h"
#include "planner/sim/cost_model.h"
#include "schemas/plan.pb.h"

namespace piper::planner {

struct PlanningOptions {
  // Run the IR verifier after building the task DAG and after every directive, which names
  // the pass that broke it; off (piper-plan --no-verify, for large plans: the verifier is a
  // full pass over the DAG each time), only the final DAG, the one lowered, is verified.
  bool verify = true;
  // Rewrite attention, LayerNorm and GELU patterns into fused ops before autodiff
  // (planner/fusion); off: train the ops as exported.
  bool fuse = true;
  // Device and link rates of the cost model that estimates each rank's step
  // (Plan.planned_tasks, Plan.planned_step).
  sim::DeviceRates rates;
};

class RankPlans;

struct PlanningResult {
  std::vector<plan::Plan> plans;  // index = rank; plan_ranks leaves it empty
  // Where each rank's plan comes from, one at a time.
  std::shared_ptr<const RankPlans> ranks;
  int num_tasks = 0;
  int num_ops = 0;
  // Fusions made, per fusion rule (empty when fusion is off).
  std::map<std::string, int> fusions;
  // Casts the strategy's precision "bf16" inserted into the forward graph (0 for others).
  int bf16_casts = 0;
  // What each of the strategy's "frozen" globs froze.
  std::vector<FrozenMatch> frozen;
  // The files of the model's external data, as found (the plans record them).
  std::vector<formats::ExternalFile> external_files;
};

// The strategy as planned: "stages": "auto" resolved into annotations
// (auto_stages.h) and generators expanded into primitives; what
// `piper-plan --expand` prints.
strategy::Strategy expand_strategy(const std::string& model_path,
                                   const strategy::Strategy& written);

// The planned DAG, with what lowering it needs, from which each rank's plan is made when it is
// asked for: a large job is written one plan at a time (piper-plan), never held whole. The
// DAG is indexed (lower/dag_index.h) and its step simulated (sim/planned_timeline.h) once.
class RankPlans {
 public:
  int num_ranks() const { return num_ranks_; }
  // Rank `rank`'s plan, its planned timeline included.
  plan::Plan plan(int rank) const;
  // The same, made in `into`, an empty message (on an arena, say).
  void plan(int rank, plan::Plan& into) const;
  // The ranks in the order in which a source() lowers each symmetry class once (lower.h).
  const std::vector<int>& order() const;
  // Rank `rank`'s plan, its planned timeline included, valid until the next call: ranks asked
  // for in order() are specialised from the rank before where they are symmetric. The plans
  // are plan()'s. One source per thread.
  std::function<const plan::Plan&(int rank)> source() const;
  // Plans the sources made so far by lowering a rank, and by specialising another's.
  int lowered() const;
  int specialised() const;

 private:
  friend PlanningResult plan_ranks(const std::string&, const strategy::Strategy&,
                                   const PlanningOptions&);
  struct State;
  std::shared_ptr<const State> state_;
  int num_ranks_ = 0;
};

// Plans everything but the ranks' plans: `plans` stays empty and `ranks` makes them.
// Throws as plan_model.
PlanningResult plan_ranks(const std::string& model_path, const strategy::Strategy& strategy,
                          const PlanningOptions& options = {});

// Throws piper::Error naming the file, JSON path or ONNX node at fault.
PlanningResult plan_model(const std::string& model_path, const strategy::Strategy& strategy,
                          const PlanningOptions& options = {});

}  // namespace piper::planner
