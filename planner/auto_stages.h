// "stages": "auto" in a `pipeline` directive: the planner chooses the stages.
#pragma once

#include <string>

#include "formats/strategy.h"
#include "planner/import/import.h"

namespace piper::planner {

// The strategy with every auto-staged pipeline resolved: the model's forward
// ops, in order, are cut into devices x chunks contiguous runs of about equal
// estimated forward plus backward time per microbatch (each forward op with the
// backward ops that differentiate it, at planner/sim/cost_model.h's default
// rates), and each op's run becomes an annotation
// {"match": <node name>, "tags": {<tag>: stage}} appended to the strategy, so
// that it plans, and `piper-plan --expand` prints it, without "auto". A
// strategy without "auto" comes back unchanged. Throws piper::Error naming the
// directive when the model has fewer costly ops than stages, and as planning
// does (naming the model and node) when the model cannot be differentiated.
// `options` import the model as planning does (frozen initializers and the
// batch decide which nodes constant folding leaves).
strategy::Strategy resolve_auto_stages(const std::string& model_path,
                                       const strategy::Strategy& strategy,
                                       const ImportOptions& options);

}  // namespace piper::planner
