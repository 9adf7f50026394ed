// Checks the optimizer kernels and piper.SumSquares share on every backend
// (engine/cpu/optimizers.cc, engine/cuda/optimizer_ops.cc), so that their errors read alike.
#pragma once

#include <vector>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

// Checks that no output is given and that inputs 0 to names.size() - 1 are float32 tensors
// shaped like the parameter (input 0); `names` label them in errors.
void check_optimizer_state(const KernelArgs& args, const std::vector<const char*>& names);

// The global gradient norm, the optional input `index` after the state (a float32 scalar),
// or null when the plan gives none. An update that reads a norm that is not finite changes
// nothing.
const float* gradient_norm_input(const KernelArgs& args, size_t index);

// piper.SumSquares(X1, ..., Xn) -> Y, attributes `starts` and `counts`: the slices of the
// flattened float32 inputs whose squares add up to the float32 scalar Y.
struct SquaredSlices {
  std::vector<const float*> data;  // the first element of each slice
  std::vector<int64_t> counts;
  float* y = nullptr;
};
SquaredSlices squared_slices(const KernelArgs& args);

}  // namespace piper::engine::cpu
