// The IR's invariants, checked after every directive in tests and debug builds.
#pragma once

#include <string>
#include <vector>

#include "planner/ir/task_graph.h"

namespace piper::ir {

// Returns every violated invariant, one message each; empty when valid:
//  - edges name existing tasks, and the DAG (data + temporal edges) is acyclic;
//  - every task has at least one device and a stream;
//  - every input a compute task reads is produced on its device by a task
//    joined to it by a data edge, arrives there by a recv, or is a parameter,
//    constant or batch input;
//  - every send has exactly one matching recv (tensor, microbatch, peers);
//  - the tasks of one collective agree on their device set;
//  - temporal edges join tasks on the same devices, or a task and one on
//    some of its devices (a replicated reader before one replica's recv).
std::vector<std::string> verify(const TaskGraph& graph);

// Throws std::logic_error listing the violations, prefixed with `after`
// (for instance "after directive 2 (place)").
void verify_or_throw(const TaskGraph& graph, const std::string& after);

}  // namespace piper::ir
