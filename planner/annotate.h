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
// that matches no node, with `source` (the strategy file) and its JSON path.
void annotate(ir::OpGraph& graph, const std::vector<strategy::Annotation>& annotations,
              const std::string& source);

}  // namespace piper::planner
