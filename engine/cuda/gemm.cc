#include "engine/cuda/gemm.h"

#include <string>

#include "engine/cuda/check.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

int32_t checked_int(int64_t value, const char* name, const std::string& what) {
  if (value > INT32_MAX) {
    throw Error(what + ": " + name + " = " + std::to_string(value) +
                " exceeds cuBLASLt's 32-bit range; split the operation into smaller ones");
  }
  return static_cast<int32_t>(value);
}

cublasLtMatrixLayout_t column_major_layout(uint64_t rows, uint64_t cols, int64_t ld,
                                           int32_t batches, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  PIPER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, rows, cols, ld));
  const cublasStatus_t count = cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batches, sizeof batches);
  const cublasStatus_t offset = cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
  if (count != CUBLAS_STATUS_SUCCESS || offset != CUBLAS_STATUS_SUCCESS) {
    cublasLtMatrixLayoutDestroy(layout);
    PIPER_CUBLAS_CHECK(count != CUBLAS_STATUS_SUCCESS ? count : offset);
  }
  return layout;
}

}  // namespace

StridedProduct::StridedProduct(CudaContext& context, const ProductShape& s, const std::string& what)
    : context_(context) {
  const int32_t m = checked_int(s.m, "M", what), n = checked_int(s.n, "N", what);
  const int32_t k = checked_int(s.k, "K", what);
  const int32_t batches = checked_int(s.batches, "the batch count", what);
  for (int64_t ld : {s.lda, s.ldb, s.ldc}) checked_int(ld, "a leading dimension", what);
  try {
    PIPER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // cuBLASLt's first operand is B, its second A (column-major Cᵀ = op(B)ᵀ op(A)ᵀ).
    const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    PIPER_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    PIPER_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    // The stored B, row-major [k, n] ([n, k] when transposed), is column-major [n, k] ([k, n]).
    b_ = column_major_layout(s.trans_b ? k : n, s.trans_b ? n : k, s.ldb, batches, s.stride_b);
    a_ = column_major_layout(s.trans_a ? m : k, s.trans_a ? k : m, s.lda, batches, s.stride_a);
    c_ = column_major_layout(n, m, s.ldc, batches, s.stride_c);
    cublasLtMatmulPreference_t preference = nullptr;
    PIPER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const size_t workspace = context_.queue().workspace_bytes;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulAlgoGetHeuristic(context_.blas(), desc_, b_, a_, c_, c_, preference, 1,
                                              &result, &found);
    }
    cublasLtMatmulPreferenceDestroy(preference);
    PIPER_CUBLAS_CHECK(status);
    if (found == 0) {
      throw Error(what + ": cuBLASLt has no algorithm for " + std::to_string(batches) +
                  " float32 products of [" + std::to_string(m) + ", " + std::to_string(k) +
                  "] by [" + std::to_string(k) + ", " + std::to_string(n) + "]");
    }
    algo_ = result.algo;
  } catch (...) {
    release();
    throw;
  }
}

StridedProduct::~StridedProduct() { release(); }

void StridedProduct::release() {
  if (c_) cublasLtMatrixLayoutDestroy(c_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  c_ = a_ = b_ = nullptr;
  desc_ = nullptr;
}

void StridedProduct::run(const float* a, const float* b, float* c, float alpha, float beta) const {
  const Queue& queue = context_.queue();
  PIPER_CUBLAS_CHECK(cublasLtMatmul(context_.blas(), desc_, &alpha, b, b_, a, a_, &beta, c, c_, c,
                                    c_, &algo_, queue.workspace, queue.workspace_bytes,
                                    queue.stream));
}

}  // namespace piper::engine::cuda
