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

size_t element_bytes(cudaDataType_t type) { return type == CUDA_R_16BF ? 2 : 4; }

const char* type_name(cudaDataType_t type) { return type == CUDA_R_16BF ? "bfloat16" : "float32"; }

cublasLtMatrixLayout_t column_major_layout(cudaDataType_t type, uint64_t rows, uint64_t cols,
                                           int64_t ld, int32_t batches, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  PIPER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
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

// Sets `attribute` of `preference` to `value`.
template <typename T>
cublasStatus_t prefer(cublasLtMatmulPreference_t preference,
                      cublasLtMatmulPreferenceAttributes_t attribute, T value) {
  return cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value);
}

}  // namespace

uint32_t common_alignment(std::initializer_list<uint64_t> values) {
  uint32_t alignment = 256;
  for (uint64_t value : values) {
    while (value % alignment != 0) alignment /= 2;
  }
  return alignment;
}

uint64_t address(const void* data) { return reinterpret_cast<uintptr_t>(data); }

StridedProduct::StridedProduct(CudaContext& context, const ProductShape& s, const std::string& what)
    : context_(context) {
  const int32_t m = checked_int(s.m, "M", what), n = checked_int(s.n, "N", what);
  const int32_t k = checked_int(s.k, "K", what);
  const int32_t batches = checked_int(s.batches, "the batch count", what);
  for (int64_t ld : {s.lda, s.ldb, s.ldc}) checked_int(ld, "a leading dimension", what);
  try {
    const cublasComputeType_t compute =
        s.tf32 && s.ab_type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    PIPER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    // cuBLASLt's first operand is B, its second A (column-major Cᵀ = op(B)ᵀ op(A)ᵀ).
    const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    PIPER_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    PIPER_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    set_epilogue(s);
    // The stored B, row-major [k, n] ([n, k] when transposed), is column-major [n, k] ([k, n]).
    b_ = column_major_layout(s.ab_type, s.trans_b ? k : n, s.trans_b ? n : k, s.ldb, batches,
                             s.stride_b);
    a_ = column_major_layout(s.ab_type, s.trans_a ? m : k, s.trans_a ? k : m, s.lda, batches,
                             s.stride_a);
    c_ = column_major_layout(s.c_type, n, m, s.ldc, batches, s.stride_c);
    // cuBLASLt assumes 256-byte aligned matrices unless told less: every batch's matrix.
    const size_t ab_bytes = element_bytes(s.ab_type), c_bytes = element_bytes(s.c_type);
    const uint32_t align_a = common_alignment({s.alignment, s.stride_a * ab_bytes});
    const uint32_t align_b = common_alignment({s.alignment, s.stride_b * ab_bytes});
    const uint32_t align_c = common_alignment({s.alignment, s.stride_c * c_bytes});
    cublasLtMatmulPreference_t preference = nullptr;
    PIPER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    for (cublasStatus_t set : {
             prefer(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    context_.queue().workspace_bytes),
             prefer(
                 preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                 uint32_t{CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE}),
             // cuBLASLt's A is our B (see the header).
             prefer(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b),
             prefer(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a),
             prefer(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c),
             prefer(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c),
         }) {
      if (status == CUBLAS_STATUS_SUCCESS) status = set;
    }
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulAlgoGetHeuristic(context_.blas(), desc_, b_, a_, c_, c_, preference, 1,
                                              &result, &found);
    }
    cublasLtMatmulPreferenceDestroy(preference);
    PIPER_CUBLAS_CHECK(status);
    if (found == 0) {
      throw Error(what + ": cuBLASLt has no algorithm for " + std::to_string(batches) + " " +
                  type_name(s.ab_type) + " products of [" + std::to_string(m) + ", " +
                  std::to_string(k) + "] by [" + std::to_string(k) + ", " + std::to_string(n) +
                  "] into " + type_name(s.c_type) + (s.gelu ? " with a GELU epilogue" : "") +
                  (s.bias ? " with a bias epilogue" : ""));
    }
    algo_ = result.algo;
  } catch (...) {
    release();
    throw;
  }
}

StridedProduct::~StridedProduct() { release(); }

void StridedProduct::set_epilogue(const ProductShape& s) {
  static constexpr cublasLtEpilogue_t kEpilogues[2][2][2] = {
      // [gelu][gelu_input][bias]
      {{CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS},
       {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS}},
      {{CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS},
       {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS}}};
  const cublasLtEpilogue_t epilogue =
      kEpilogues[s.gelu][s.gelu && s.gelu_input != nullptr][s.bias != nullptr];
  if (epilogue == CUBLASLT_EPILOGUE_DEFAULT) return;
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  const int32_t c_type = s.c_type;
  if (s.bias != nullptr) {
    // Column-major Cᵀ has n rows: the bias runs along them, the same for every column (row of
    // C) and, with the default batch stride 0, for every batch.
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, s.bias);
    set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, c_type);
  }
  if (s.gelu && s.gelu_input != nullptr) {
    // The GELU's input is stored like C: column-major Cᵀ, ldc apart, stride_c between batches.
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, s.gelu_input);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, s.ldc);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, s.stride_c);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, c_type);
  }
}

void StridedProduct::release() {
  if (c_) cublasLtMatrixLayoutDestroy(c_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  c_ = a_ = b_ = nullptr;
  desc_ = nullptr;
}

void StridedProduct::run(const void* a, const void* b, void* c, float alpha, float beta) const {
  const Queue& queue = context_.queue();
  PIPER_CUBLAS_CHECK(cublasLtMatmul(context_.blas(), desc_, &alpha, b, b_, a, a_, &beta, c, c_, c,
                                    c_, &algo_, queue.workspace, queue.workspace_bytes,
                                    queue.stream));
}

}  // namespace piper::engine::cuda
