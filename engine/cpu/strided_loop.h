// Broadcasting and strided iteration for the elementwise, reduction and layout
// kernels. Strides are computed once in prepare(); a run walks rows of the
// innermost (merged) dimension, so inner loops are plain pointer loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/cpu/parallel.h"
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
  // `bases`, when given, holds each operand's element offset of the first element.
  StridedLoop(const Shape& shape, const std::vector<std::vector<int64_t>>& operand_strides,
              std::vector<int64_t> bases = {});

  // Calls row(offsets, n) once per innermost row: offsets[k] is operand k's element offset of
  // the row's first element; the row has n elements, operand k advancing by inner_stride(k).
  template <typename F>
  void for_each_row(F&& row) const {
    for_each_row(0, rows(), row);
  }
  // The same for rows [begin, end) of the rows() rows only.
  template <typename F>
  void for_each_row(int64_t begin, int64_t end, F&& row) const;
  // for_each_row with the rows spread over parallel.h's threads, rows longer than
  // 2 · kParallelGrain cut into segments (a contiguous tensor is one row): row() runs
  // concurrently on different pieces, so each call must write only the elements it is given.
  template <typename F>
  void parallel_for_each_row(F&& row) const;

  int64_t inner_stride(size_t operand) const { return inner_strides_[operand]; }
  int64_t total() const { return total_; }
  int64_t rows() const { return total_ == 0 ? 0 : total_ / inner_; }

 private:
  size_t operands_ = 0;
  int64_t total_ = 0;
  int64_t inner_ = 1;
  std::vector<int64_t> bases_;  // [operand]
  std::vector<int64_t> inner_strides_;
  std::vector<int64_t> outer_dims_;                  // outermost first
  std::vector<std::vector<int64_t>> outer_strides_;  // [operand][dim]
};

// `shape`'s loop cut along dimension `dim` into `count` slabs of consecutive indices (as even
// as can be; fewer when the dimension is shorter), each a loop of its own with base offsets.
// Slabs of a dimension that an output does not reduce over write disjoint output elements, in
// the order the whole loop would: reductions run slab by slab on several threads, each output
// summed in the same order as with one thread.
std::vector<StridedLoop> slab_loops(const Shape& shape,
                                    const std::vector<std::vector<int64_t>>& operand_strides,
                                    size_t dim, int64_t count);

// dst[loop] = src[loop] for a two-operand loop (dst first), rows spread over the pool.
template <typename T>
void strided_copy(const StridedLoop& loop, const T* src, T* dst) {
  const int64_t sd = loop.inner_stride(0), ss = loop.inner_stride(1);
  loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
    T* out = dst + offsets[0];
    const T* in = src + offsets[1];
    if (sd == 1 && ss == 1) {
      std::memcpy(out, in, static_cast<size_t>(n) * sizeof(T));
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * sd] = in[i * ss];
    }
  });
}

template <typename F>
void StridedLoop::for_each_row(int64_t begin, int64_t end, F&& row) const {
  if (begin >= end) {
    return;
  }
  std::vector<int64_t> offsets = bases_;
  std::vector<int64_t> counter(outer_dims_.size(), 0);
  for (size_t j = outer_dims_.size(), r = static_cast<size_t>(begin); j-- > 0;) {
    counter[j] = static_cast<int64_t>(r % static_cast<size_t>(outer_dims_[j]));
    r /= static_cast<size_t>(outer_dims_[j]);
    for (size_t k = 0; k < operands_; ++k) offsets[k] += counter[j] * outer_strides_[k][j];
  }
  for (int64_t r = begin; r < end; ++r) {
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

template <typename F>
void StridedLoop::parallel_for_each_row(F&& row) const {
  const int64_t segments = std::max<int64_t>(1, inner_ / kParallelGrain);
  if (segments == 1) {
    parallel_for(rows(), (kParallelGrain + inner_ - 1) / inner_,
                 [&](int64_t begin, int64_t end) { for_each_row(begin, end, row); });
    return;
  }
  const int64_t length = (inner_ + segments - 1) / segments;
  parallel_for(rows() * segments, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> shifted(operands_);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t first = t % segments * length;
      for_each_row(t / segments, t / segments + 1, [&](const int64_t* offsets, int64_t n) {
        for (size_t k = 0; k < operands_; ++k) {
          shifted[k] = offsets[k] + first * inner_strides_[k];
        }
        row(shifted.data(), std::min(length, n - first));
      });
    }
  });
}

}  // namespace piper::engine::cpu
