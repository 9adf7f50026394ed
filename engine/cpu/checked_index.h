// The run-time index check of the gathers and scatters (indexing.cc, nd_indexing.cc; the CUDA
// kernels report the same message).
#pragma once

#include <cstdint>
#include <string>

#include "formats/error.h"

namespace piper::engine::cpu {

// The error of `index`, at `position` in the indices, out of range for an axis of `size`.
inline std::string index_error(const std::string& op, int64_t index, int64_t size,
                               int64_t position) {
  return op + ": index " + std::to_string(index) + " at position " + std::to_string(position) +
         " is out of range for an axis of size " + std::to_string(size) +
         "; check the indices data";
}

// An index into an axis of `size`, wrapped once if negative; throws index_error when out of
// range.
inline int64_t checked_index(const std::string& op, int64_t index, int64_t size, int64_t position) {
  const int64_t i = index < 0 ? index + size : index;
  if (i < 0 || i >= size) throw Error(index_error(op, index, size, position));
  return i;
}

}  // namespace piper::engine::cpu
