// Which Piper this is: plans record the planner's build id and piper-run compares it with
// its own, since a plan is only known to run on the engine built with its planner.
#pragma once

#include <string>

namespace piper::formats {

// "0.1.0+<commit>" ("-modified" when the tree had uncommitted changes, "unknown" outside git).
const std::string& piper_build_id();

// Piper's version alone, e.g. "0.1.0".
const char* piper_version();

}  // namespace piper::formats
