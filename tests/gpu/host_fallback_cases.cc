// Ops the CUDA backend runs through the CPU kernel on host copies of their tensors: the
// staging must give the CPU kernel's results, constant inputs included.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> HostFallbackCases() {
  return {
      {"Range",
       "Range",
       {},
       {Values({}, plan::FLOAT32, {1}), Values({}, plan::FLOAT32, {5}),
        Values({}, plan::FLOAT32, {0.5})},
       {F({8})}},
  };
}

}  // namespace piper::engine::testing
