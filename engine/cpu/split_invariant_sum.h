// Sums over rows whose order splitting the rows in halves does not change: the row reductions
// that data parallelism (and microbatches) cut along the batch, a replica summing its half of
// the rows and the float32 all-reduce adding the halves (the norms' weight and bias gradients,
// bias gradients, the embedding's scatter-add). A sum over R rows is the sum of its first half
// plus the sum of its second half while R is even, else the rows added one after the other: the
// split-invariant order of the products' K (split_invariant_gemm.h) down to single
// rows, which costs no more additions than summing the rows in turn. Two replicas' halves added
// by a 2-member all-reduce (a + b, commutative) then give one process's bits, as do 2^k
// microbatches or replicas whose partial sums are added pairwise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/cpu/parallel.h"

namespace piper::engine::cpu {

// The rows each sequential sum of the split-invariant order adds: R's odd part (0 for none).
inline int64_t split_invariant_leaf(int64_t rows) {
  while (rows > 0 && rows % 2 == 0) rows /= 2;
  return rows;
}

// sums[c] (c in [0, columns)) = Σ over rows r in [0, rows) of row r's term at column c, in the
// split-invariant order, each node's sum in float32; add_row(r, acc) adds row r's `columns`
// terms into acc (acc[c] += term). Zero rows give zeros.
template <typename AddRow>
void split_invariant_sums(int64_t rows, int64_t columns, float* sums, const AddRow& add_row) {
  if (columns <= 0) return;
  if (rows <= 0) {
    std::fill(sums, sums + columns, 0.0f);
    return;
  }
  const int64_t leaf = split_invariant_leaf(rows);
  const int64_t leaves = rows / leaf;  // a power of 2
  int levels = 1;
  for (int64_t l = leaves; l > 1; l /= 2) ++levels;
  // After leaf t the stack holds one sum per set bit of t + 1: the top two are added while
  // t + 1 is divisible by 2, 4, ... (split_invariant_gemm.cc's sum_tile, on rows).
  thread_local std::vector<float> stack;
  stack.resize(static_cast<size_t>(levels * columns));
  int depth = 0;
  for (int64_t t = 0; t < leaves; ++t) {
    float* acc = stack.data() + depth * columns;
    std::fill(acc, acc + columns, 0.0f);
    for (int64_t r = t * leaf; r < (t + 1) * leaf; ++r) add_row(r, acc);
    ++depth;
    for (int64_t done = t + 1; done % 2 == 0; done /= 2) {
      --depth;
      float* into = stack.data() + (depth - 1) * columns;
      const float* top = stack.data() + depth * columns;
      for (int64_t c = 0; c < columns; ++c) into[c] += top[c];
    }
  }
  std::copy(stack.data(), stack.data() + columns, sums);
}

// split_invariant_sums with the columns cut into blocks on parallel.h's threads (a column's sum
// does not depend on the block it is in): add_rows(r, first, last, acc) adds row r's terms of
// columns [first, last) into acc[0, last - first).
template <typename AddRows>
void parallel_split_invariant_sums(int64_t rows, int64_t columns, float* sums,
                                   const AddRows& add_rows) {
  constexpr int64_t kBlockColumns = 256;
  const int64_t blocks = (columns + kBlockColumns - 1) / kBlockColumns;
  const int64_t per_block = std::max<int64_t>(1, rows * std::min(columns, kBlockColumns));
  parallel_for(
      blocks, (kParallelGrain + per_block - 1) / per_block, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t first = b * kBlockColumns, last = std::min(columns, first + kBlockColumns);
          split_invariant_sums(rows, last - first, sums + first,
                               [&](int64_t r, float* acc) { add_rows(r, first, last, acc); });
        }
      });
}

}  // namespace piper::engine::cpu
