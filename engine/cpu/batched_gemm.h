// Batched row-major GEMMs, spread over parallel.h's threads: MatMul, Gemm and Einsum's
// contractions (gemm.cc, einsum.cc). Every element is summed in split_invariant_gemm.h's order,
// fixed by K alone, so that a tensor- or data-parallel split of a product computes the bits one
// process computes (docs/strategy.md, Precision).
#pragma once

#include <cstdint>
#include <vector>

namespace piper::engine::cpu {

// C[b] = alpha · op(A[b]) · op(B[b]) + beta · C[b] for every batch b, op(X) = X or Xᵀ, at
// element offsets a_offsets[b], b_offsets[b] and c_offsets[b]. Fill in the fields, call
// prepare() once, then run() any number of times.
struct BatchedGemm {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0, lda = 1, ldb = 1, ldc = 1;
  float alpha = 1.0f;
  std::vector<int64_t> a_offsets, b_offsets, c_offsets;

  // Folds the batches into one taller GEMM when they share B and A's and C's batches are
  // stacked densely.
  void prepare();

  // Runs the batches on parallel.h's threads; when there are fewer batches than threads, each
  // GEMM is cut into panels of C's rows (or columns, when N > M), which gives every element
  // the same bits whatever the thread count. A `bias` (n floats, shared by the batches) is
  // added to every row of C last, as split_invariant_sgemm adds it.
  void run(const float* a, const float* b, float* c, float beta, const float* bias = nullptr) const;

 private:
  void run_task(const float* a, const float* b, float* c, float beta, const float* bias,
                int64_t task, int64_t panels) const;

  bool split_rows_ = true;
};

}  // namespace piper::engine::cpu
