// The update pass: one optimizer op (pass U) per trained parameter.
#pragma once

#include "formats/strategy.h"
#include "planner/ir/op_graph.h"

namespace piper::planner {

// Adds piper.SGD or piper.AdamW for every entry of `graph.trained`, with its
// state tensors (zero at start, kept across steps). Update ops carry the tags
// of the parameter's first consumer, so they land with the layer they update.
void add_optimizer(ir::OpGraph& graph, const strategy::Optimizer& optimizer);

}  // namespace piper::planner
