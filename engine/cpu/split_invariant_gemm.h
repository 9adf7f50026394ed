// A float32 matrix product whose every element is summed in an order fixed by K alone, so that
// splitting the product (its rows, columns or K) over calls, threads or ranks does not change
// its bits: the kernel of every CPU matrix product (batched_gemm.h). OpenBLAS's float32 GEMM
// gives an element other bits depending on how many rows and columns the call has and where the
// element lies in it (measured with OpenBLAS 0.3.21's Haswell and SkylakeX kernels), which a
// tensor- or data-parallel split of a product then turns into another rounding, and AdamW
// (which moves a weight by about lr whatever its gradient's size) into other weights.
#pragma once

#include <cstdint>

namespace piper::engine::cpu {

// Length of the sequential sums the split-invariant order starts from: K is halved while it is
// even and its halves hold at least this many terms.
inline constexpr int64_t kSplitInvariantMinLeaf = 16;

// C = alpha · S + beta · C, row-major, where S = op(A) · op(B) (op(X) = X or Xᵀ) and each
// element of S is summed pairwise over K: S(K) = S(first half) + S(second half) while K is even
// and a half holds at least kSplitInvariantMinLeaf terms, else the terms added one after the
// other: the first product rounded, each next one added by a fused multiply-add (x · y + sum
// rounded once, fmaf's bits on every instruction set). An element's bits
// depend only on its row of op(A), its column of op(B) and K, and a product over K whose two
// halves are computed apart and added gives those bits too (a tensor-parallel row-parallel
// product over two members, or a weight gradient's rows over two replicas); a bias in C is added
// to the finished sum, as after such an all-reduce. beta = 0 does not read C. A `bias` of n
// floats is added to every row last: C = (alpha · S + beta · C) + bias, each + rounded: the bits
// of C pre-filled with the bias and beta = 1, without a pass over C to fill it.
void split_invariant_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                           float* c, int64_t ldc, const float* bias = nullptr);

}  // namespace piper::engine::cpu
