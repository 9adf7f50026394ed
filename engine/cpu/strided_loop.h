// Broadcasting and strided iteration for the elementwise, reduction and layout
// kernels. Strides are computed once in prepare(); a run walks rows of the
// innermost (merged) dimension, so inner loops are plain pointer loops.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/runtime/tensor.h"

namespace piper::engine::cpu {

// Element strides of a C-order tensor of `shape`.
std::vector<int64_t> contiguous_strides(const Shape& shape);

// True when `from` broadcasts to `to` under numpy rules (right-aligned; each dimension of
// `from` equals the matching one of `to` or is 1; `from` has no more dimensions than `to`).
bool broadcasts_to(const Shape& from, const Shape& to);

// The numpy broadcast of two shapes; throws piper::Error naming both when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Strides (in elements, aligned with `to`'s dimensions) reading a C-order tensor of shape
// `from` broadcast to `to`: 0 on broadcast dimensions. Requires broadcasts_to(from, to).
std::vector<int64_t> broadcast_strides(const Shape& from, const Shape& to);

// Iterates the index space `shape` for several operands, each with its own strides over
// `shape`'s dimensions. Size-1 dimensions are dropped and adjacent dimensions merged
// wherever every operand allows it.
class StridedLoop {
 public:
  StridedLoop() = default;
  StridedLoop(const Shape& shape, const std::vector<std::vector<int64_t>>& operand_strides);

  // Calls row(offsets, n) once per innermost row: offsets[k] is operand k's element offset of
  // the row's first element; the row has n elements, operand k advancing by inner_stride(k).
  template <typename F>
  void for_each_row(F&& row) const;

  int64_t inner_stride(size_t operand) const { return inner_strides_[operand]; }
  int64_t total() const { return total_; }

 private:
  size_t operands_ = 0;
  int64_t total_ = 0;
  int64_t inner_ = 1;
  std::vector<int64_t> inner_strides_;
  std::vector<int64_t> outer_dims_;                  // outermost first
  std::vector<std::vector<int64_t>> outer_strides_;  // [operand][dim]
};

template <typename F>
void StridedLoop::for_each_row(F&& row) const {
  if (total_ == 0) {
    return;
  }
  std::vector<int64_t> offsets(operands_, 0);
  std::vector<int64_t> counter(outer_dims_.size(), 0);
  const int64_t rows = total_ / inner_;
  for (int64_t r = 0; r < rows; ++r) {
    row(offsets.data(), inner_);
    for (size_t j = outer_dims_.size(); j-- > 0;) {
      for (size_t k = 0; k < operands_; ++k) {
        offsets[k] += outer_strides_[k][j];
      }
      if (++counter[j] < outer_dims_[j]) {
        break;
      }
      for (size_t k = 0; k < operands_; ++k) {
        offsets[k] -= outer_strides_[k][j] * outer_dims_[j];
      }
      counter[j] = 0;
    }
  }
}

}  // namespace piper::engine::cpu
