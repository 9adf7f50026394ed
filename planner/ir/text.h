// The IR's text form, for tests and debugging: a task DAG printed by
// `print` parses back with `parse` into an equal graph.
#pragma once

#include <string>

#include "planner/ir/task_graph.h"

namespace piper::ir {

std::string print(const TaskGraph& graph);

// Throws std::invalid_argument naming the line and what was expected.
TaskGraph parse(const std::string& text);

}  // namespace piper::ir
