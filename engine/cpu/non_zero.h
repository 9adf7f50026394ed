// NonZero: the coordinates of the non-zero elements of X, in row-major order, as Y[d][i] =
// coordinate d of the i-th, a [rank, count] int64 tensor. How many there are is known only
// when the kernel runs, so Y is planned at its bound (X's element count) and packed as [rank,
// count] from its start, the rest zeroed; the optional output 1 receives the count, the
// extent the plan gives Y's second dimension (docs/plan-format.md). The CUDA kernel runs the
// same host code on a copy of X: the count has to reach the host anyway, to size later
// kernels.
#pragma once

#include <cstdint>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

// Checks NonZero's operands: X of rank >= 1 (float32, bfloat16, int64 or bool), Y int64 of
// shape [rank(X), bound], an optional int64 scalar count.
void check_non_zero(const KernelArgs& args);

// Writes NonZero of a tensor shaped like `x` whose bytes are host memory at `data` into
// `indices` (`capacity` columns); returns the count. Throws "NonZero: ..." when it exceeds
// the capacity.
int64_t find_non_zero(const TensorView& x, const void* data, int64_t* indices, int64_t capacity);

}  // namespace piper::engine::cpu
