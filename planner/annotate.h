// Annotations: tags on ops by node-name pattern.
#pragma once

#include <string>
#include <vector>

#include "formats/strategy.h"
#include "planner/ir/op_graph.h"

namespace piper::planner {

// Gives every forward op the tags of each annotation whose `match` globs its
// name (later annotations override earlier ones per tag). Forward ops no
// annotation names go with their neighbours: they take the tags of their
// nearest tagged producer, or, with none (leading ops such as an embedding),
// of their first tagged consumer. Throws piper::Error naming an annotation
// that matches no node, with `source` (the strategy file) and its JSON path. `expert_tag` (the
// tag of a shard directive of style "expert", or empty) numbers each expert's ops: it stays on
// the ops an annotation names and never goes to their neighbours.
void annotate(ir::OpGraph& graph, const std::vector<strategy::Annotation>& annotations,
              const std::string& source, const std::string& expert_tag = "");

// Moves `expert_tag` from every op's tags (the forward ops annotated with it, and the backward
// and update ops that inherited it) to the op's integer attribute "expert": the experts' ops
// then share their neighbours' tasks, and the shard directive spreads them over its group
// (directives/expert_modules.h).
void mark_experts(ir::OpGraph& graph, const std::string& expert_tag);

}  // namespace piper::planner
