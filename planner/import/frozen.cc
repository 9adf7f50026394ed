#include "planner/import/frozen.h"

#include "formats/error.h"
#include "formats/strategy.h"

namespace piper::planner {

std::vector<FrozenMatch> match_frozen(const onnx::ModelProto& model,
                                      const std::vector<std::string>& globs,
                                      const std::string& source) {
  const auto& initializers = model.graph().initializer();
  std::vector<FrozenMatch> matches;
  for (size_t i = 0; i < globs.size(); ++i) {
    FrozenMatch match{globs[i], {}};
    for (const auto& init : initializers) {
      if (strategy::glob_match(globs[i], init.name())) match.initializers.push_back(init.name());
    }
    if (match.initializers.empty()) {
      throw Error(source + ": $.frozen[" + std::to_string(i) + "]: '" + globs[i] +
                  "' matches no initializer" +
                  (initializers.empty()
                       ? std::string(" (the model has none)")
                       : "; initializer names look like '" + initializers.begin()->name() + "'") +
                  " (piper-plan --list MODEL.onnx prints them all)");
    }
    matches.push_back(std::move(match));
  }
  return matches;
}

}  // namespace piper::planner
