// The geometry of a numpy-style matrix product, shared by the CPU kernels (gemm.cc) and the
// CUDA ones (gemm_ops.cc), and ONNX Gemm's checks: M, N, K, the stored matrices' row lengths and
// one (A, B, Y) element offset per batch, with the CPU kernel's errors.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

// Y[batch] = op(A[batch]) op(B[batch]), row-major, op transposing the last two dimensions
// where asked; batch dimensions broadcast.
struct MatmulGeometry {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 1, ldb = 1;  // row lengths of the stored A and B matrices
  std::vector<int64_t> a_offsets, b_offsets, y_offsets;
};

// Checks that A times B (transposed where asked) gives Y's shape and returns the product's
// geometry; throws piper::Error "<op>: ..." otherwise. 1-D operands follow numpy: A [K] is
// [1, K] and B [K] is [K, 1], the extra dimension dropped from Y.
MatmulGeometry matmul_geometry(const KernelArgs& args, const TensorView& a, const TensorView& b,
                               const TensorView& y, bool trans_a, bool trans_b);

// ONNX Gemm(A, B[, C]) -> Y: A and B matrices (transposed by the attributes transA and transB),
// C broadcasting to Y. Returns the product's geometry; the dtypes are the backend's to check.
MatmulGeometry check_gemm(const KernelArgs& args);

}  // namespace piper::engine::cpu
