// Generators: directives that are shorthand for primitive ones.
#pragma once

#include "formats/strategy.h"

namespace piper::planner {

// The strategy with every generator replaced by the primitives it stands
// for, in place; primitives keep the index and path of the directive they
// came from. `piper-plan --expand` prints this.
strategy::Strategy expand_generators(const strategy::Strategy& strategy);

}  // namespace piper::planner
