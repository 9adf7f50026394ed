// A plan folder: the rank<N>.plan files one piper-plan run writes (docs/plan-format.md).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "schemas/plan.pb.h"

namespace piper::formats {

// The paths of rank0.plan ... rank<N-1>.plan in `dir`, in rank order. Throws piper::Error,
// with `what` ("--plans 'DIR'") as the subject, when `dir` is not a directory, holds no plan,
// or misses a rank below the highest.
std::vector<std::string> rank_plan_paths(const std::string& dir, const std::string& what);

// Writes one rank<r>.plan per plan into `dir` and never deletes what Piper did not write.
// A new `dir` (and its parents) is created whole or not at all: the plans are staged in a
// sibling folder that is renamed into place. An existing `dir` must hold nothing but plan
// files, or `force` must be set; each plan then replaces its file atomically and rank files
// beyond the new world size (of an earlier, larger plan) are removed. Throws piper::Error
// naming `dir`, and what in it is not Piper's, leaving `dir` as it was.
void write_plan_directory(const std::vector<plan::Plan>& plans, const std::string& dir, bool force);

// Makes the plan of a rank, when asked for, in `plan`: an empty message on an arena that is
// cleared once the plan is written, so that no plan's thousands of messages are freed one by
// one.
using PlanOfRank = std::function<void(int rank, plan::Plan& plan)>;

// The same for the plans of ranks 0 to world_size - 1, each made by plan_of just before it is
// written and dropped after, so that one plan per thread is held at a time however many ranks
// there are. With `threads` > 1 that many threads make and write plans at once, each taking the
// next run of ranks not yet taken: plan_of must then be safe to call from several threads. The
// first exception any call throws is rethrown once all threads stopped.
void write_plan_directory(int world_size, const PlanOfRank& plan_of, const std::string& dir,
                          bool force, int threads = 1);

// Returns the plan of a rank, which stays valid until its next call: one per writing thread, so
// that a thread may keep what it made for one rank to make the next (planner::SymmetricLowering).
using PlanSource = std::function<const plan::Plan&(int rank)>;
using NewPlanSource = std::function<PlanSource()>;

// The same, each thread writing the plans of the next ranks of `order` (every rank from 0 to
// its size - 1 once) from its own source, made by new_source (which must then be safe to call
// from several threads).
void write_plan_directory(const std::vector<int>& order, const NewPlanSource& new_source,
                          const std::string& dir, bool force, int threads = 1);

}  // namespace piper::formats
