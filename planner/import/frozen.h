// The strategy's "frozen" globs against a model's initializers: what each one freezes, for
// the plan summary, and an error for a glob that freezes nothing (a typo would otherwise
// silently train what the user meant to freeze).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace piper::planner {

struct FrozenMatch {
  std::string glob;
  std::vector<std::string> initializers;  // in the model's order
};

// One entry per glob of `globs` (strategy.frozen), in order. Throws piper::Error
// "<source>: $.frozen[i]: '<glob>' matches no initializer ..." for a glob that matches none.
std::vector<FrozenMatch> match_frozen(const onnx::ModelProto& model,
                                      const std::vector<std::string>& globs,
                                      const std::string& source);

}  // namespace piper::planner
