// ONNX Slice's bounds on one axis: which elements start:end:step selects from an axis of
// `dim` elements. Shared by the planner's constant folder and the engine's Slice kernels, so
// both clamp the same way, including PyTorch's open ends INT64_MAX and INT64_MIN.
#pragma once

#include <cstdint>

namespace piper::formats {

struct SliceRange {
  int64_t begin = 0;  // index of the first element selected
  int64_t count = 0;  // how many elements, each `step` after the previous
};

// ONNX's rule: a negative start or end counts from the end (adds `dim`), then both are
// clamped to [0, dim] for a positive step and to [0, dim-1] (start) and [-1, dim-1] (end)
// for a negative one. `step` must not be 0 and `dim` must not be negative; the arithmetic
// never overflows, whatever the int64 values.
SliceRange slice_range(int64_t start, int64_t end, int64_t step, int64_t dim);

}  // namespace piper::formats
