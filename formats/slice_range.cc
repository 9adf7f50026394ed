#include "formats/slice_range.h"

#include <algorithm>

namespace piper::formats {
namespace {

int64_t clamp_bound(int64_t bound, int64_t dim, int64_t lo, int64_t hi) {
  if (bound < 0) bound += dim;  // cannot overflow: dim >= 0
  return std::clamp(bound, lo, hi);
}

// How many of the `span` positions a stride of |step| visits from the first one.
int64_t strided_count(int64_t span, int64_t step) {
  if (span <= 0) return 0;
  const uint64_t stride = step > 0 ? static_cast<uint64_t>(step)
                                   : static_cast<uint64_t>(-(step + 1)) + 1;  // |INT64_MIN|
  return static_cast<int64_t>((static_cast<uint64_t>(span) - 1) / stride + 1);
}

}  // namespace

SliceRange slice_range(int64_t start, int64_t end, int64_t step, int64_t dim) {
  SliceRange range;
  if (dim == 0) return range;  // nothing to select, and [0, dim-1] would be empty
  if (step > 0) {
    range.begin = clamp_bound(start, dim, 0, dim);
    range.count = strided_count(clamp_bound(end, dim, 0, dim) - range.begin, step);
  } else {
    range.begin = clamp_bound(start, dim, 0, dim - 1);
    range.count = strided_count(range.begin - clamp_bound(end, dim, -1, dim - 1), step);
  }
  return range;
}

}  // namespace piper::formats
