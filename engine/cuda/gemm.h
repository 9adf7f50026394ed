// Row-major strided batched matrix products through cuBLASLt in exact float32 (no
// TF32, so results match the CPU's within float rounding): for every batch i,
// C_i = alpha · op(A_i) op(B_i) + beta · C_i with X_i = X + i · stride_x.
//
// A row-major matrix is its transpose in column-major order, so the product is computed
// as column-major Cᵀ = op(B)ᵀ op(A)ᵀ and no data moves.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "engine/cuda/context.h"

namespace piper::engine::cuda {

struct ProductShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;        // op(A) is [m, k], op(B) [k, n], C [m, n]
  int64_t lda = 1, ldb = 1, ldc = 1;  // row lengths of the stored A, B and C
  int64_t batches = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batches
};

class StridedProduct {
 public:
  // Describes the product and picks cuBLASLt's algorithm for it (m, n, k > 0). Throws
  // piper::Error naming `what` when a size exceeds cuBLASLt's 32-bit range or no algorithm
  // fits.
  StridedProduct(CudaContext& context, const ProductShape& shape, const std::string& what);
  ~StridedProduct();
  StridedProduct(const StridedProduct&) = delete;
  StridedProduct& operator=(const StridedProduct&) = delete;

  // Issues the product to the calling thread's queue.
  void run(const float* a, const float* b, float* c, float alpha, float beta) const;

 private:
  void release();

  CudaContext& context_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace piper::engine::cuda
