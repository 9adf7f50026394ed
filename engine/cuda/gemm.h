// Row-major strided batched matrix products through cuBLASLt: for every batch i,
// C_i = alpha · op(A_i) op(B_i) + beta · C_i with X_i = X + i · stride_x. Float32
// products run in exact float32 (no TF32, so results match the CPU's within float
// rounding) unless TF32 is asked for; bfloat16 ones multiply bfloat16 A and B with
// float32 accumulation (partial sums of a split K stay float32) into a float32 or
// bfloat16 C.
//
// A row-major matrix is its transpose in column-major order, so the product is computed
// as column-major Cᵀ = op(B)ᵀ op(A)ᵀ and no data moves.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/context.h"

namespace piper::engine::cuda {

struct ProductShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;        // op(A) is [m, k], op(B) [k, n], C [m, n]
  int64_t lda = 1, ldb = 1, ldc = 1;  // row lengths of the stored A, B and C
  int64_t batches = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batches
  cudaDataType_t ab_type = CUDA_R_32F;               // of A and B: CUDA_R_32F or CUDA_R_16BF
  cudaDataType_t c_type = CUDA_R_32F;  // of C: CUDA_R_32F, or CUDA_R_16BF with bfloat16 A, B
  bool tf32 = false;         // float32 A and B rounded to TF32 (CUBLAS_COMPUTE_32F_FAST_TF32)
  uint32_t alignment = 256;  // bytes that every address run() gets is a multiple of
  // A vector of n elements of c_type added to every row of every batch's C by cuBLASLt's bias
  // epilogue (CUBLASLT_EPILOGUE_BIAS), or null.
  const void* bias = nullptr;
  // C = GELU(product [+ bias]) by cuBLASLt's GELU epilogue, the tanh approximation
  // (CUBLASLT_EPILOGUE_GELU[_BIAS]); `gelu_input`, when not null, receives product [+ bias] laid
  // out as C (CUBLASLT_EPILOGUE_GELU_AUX[_BIAS]).
  bool gelu = false;
  void* gelu_input = nullptr;
};

// The largest power of two up to 256 that divides every value (addresses, byte counts): a
// ProductShape::alignment.
uint32_t common_alignment(std::initializer_list<uint64_t> values);
// `data` as a number, for common_alignment().
uint64_t address(const void* data);

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
  void run(const void* a, const void* b, void* c, float alpha, float beta) const;

 private:
  void release();
  // The bias and GELU epilogues `s` asks for.
  void set_epilogue(const ProductShape& s);
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    PIPER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof value));
  }

  CudaContext& context_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace piper::engine::cuda
