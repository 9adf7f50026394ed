// Matrix products on CUDA through cuBLASLt: ONNX Gemm and MatMul, and piper.MatMul
// (MatMul with transA/transB on the last two dimensions). Batches (numpy
// broadcasting) become strided batched products, one per run of batches whose
// operands sit at constant distances. Compute is exact float32: no TF32, so that
// results match the CPU's within float rounding.
//
// Row-major Y = op(A) op(B) is computed as column-major Yᵀ = op(B)ᵀ op(A)ᵀ: a
// row-major matrix is its transpose in column-major order, so no data moves.
#include <cublasLt.h>

#include <algorithm>

#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

// The row-major product, as the CPU kernel plans it (engine/cpu/gemm.cc): one (A, B, Y)
// element offset per batch.
struct MatmulShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 1, ldb = 1;  // row lengths of the stored A and B matrices
  std::vector<int64_t> a_offsets, b_offsets, y_offsets;
};

MatmulShape matmul_shape(const KernelArgs& args, const TensorView& a, const TensorView& b,
                         const TensorView& y, bool trans_a, bool trans_b) {
  if (a.rank() == 0 || b.rank() == 0) {
    args.fail("operands must have at least one dimension, got A " + shape_string(a.shape) +
              " and B " + shape_string(b.shape));
  }
  if ((a.rank() == 1 && trans_a) || (b.rank() == 1 && trans_b)) {
    args.fail("transA/transB need a matrix operand (rank >= 2), got A " + shape_string(a.shape) +
              " and B " + shape_string(b.shape));
  }
  const Shape a_mat =
      a.rank() == 1 ? Shape{1, a.shape[0]} : Shape(a.shape.end() - 2, a.shape.end());
  const Shape b_mat =
      b.rank() == 1 ? Shape{b.shape[0], 1} : Shape(b.shape.end() - 2, b.shape.end());
  const Shape a_batch = a.rank() <= 2 ? Shape{} : Shape(a.shape.begin(), a.shape.end() - 2);
  const Shape b_batch = b.rank() <= 2 ? Shape{} : Shape(b.shape.begin(), b.shape.end() - 2);
  MatmulShape s;
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.m = trans_a ? a_mat[1] : a_mat[0];
  s.k = trans_a ? a_mat[0] : a_mat[1];
  const int64_t kb = trans_b ? b_mat[1] : b_mat[0];
  s.n = trans_b ? b_mat[0] : b_mat[1];
  s.lda = a_mat[1];
  s.ldb = b_mat[1];
  if (s.k != kb) {
    args.fail("inner dimensions differ: A " + shape_string(a.shape) +
              (trans_a ? " (transposed)" : "") + " has K = " + std::to_string(s.k) + ", B " +
              shape_string(b.shape) + (trans_b ? " (transposed)" : "") +
              " has K = " + std::to_string(kb));
  }
  Shape batch;
  try {
    batch = cpu::broadcast_shapes(a_batch, b_batch);
  } catch (const Error& error) {
    args.fail(std::string("batch dimensions do not broadcast: ") + error.what());
  }
  Shape expected = batch;
  if (a.rank() > 1) expected.push_back(s.m);
  if (b.rank() > 1) expected.push_back(s.n);
  if (expected != y.shape) {
    args.fail("A " + shape_string(a.shape) + " times B " + shape_string(b.shape) + " gives " +
              shape_string(expected) + " but the output has shape " + shape_string(y.shape));
  }
  std::vector<int64_t> a_strides = cpu::broadcast_strides(a_batch, batch);
  std::vector<int64_t> b_strides = cpu::broadcast_strides(b_batch, batch);
  for (auto& stride : a_strides) stride *= a_mat[0] * a_mat[1];
  for (auto& stride : b_strides) stride *= b_mat[0] * b_mat[1];
  const cpu::StridedLoop loop(batch, {a_strides, b_strides});
  loop.for_each_row([&](const int64_t* offsets, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      s.a_offsets.push_back(offsets[0] + i * loop.inner_stride(0));
      s.b_offsets.push_back(offsets[1] + i * loop.inner_stride(1));
    }
  });
  for (size_t i = 0; i < s.a_offsets.size(); ++i) {
    s.y_offsets.push_back(static_cast<int64_t>(i) * s.m * s.n);
  }
  // One B for every batch and A's batches stacked contiguously: a single taller product.
  const auto batches = static_cast<int64_t>(s.a_offsets.size());
  bool fold = batches > 1 && !trans_a;
  for (int64_t i = 0; fold && i < batches; ++i) {
    fold = s.b_offsets[i] == 0 && s.a_offsets[i] == i * s.m * s.k;
  }
  if (fold) {
    s.m *= batches;
    s.a_offsets = s.b_offsets = s.y_offsets = {0};
  }
  return s;
}

int32_t checked_int(const KernelArgs& args, int64_t value, const char* what) {
  if (value > INT32_MAX) {
    args.fail(std::string(what) + " = " + std::to_string(value) +
              " exceeds cuBLASLt's 32-bit range; split the operation into smaller ones");
  }
  return static_cast<int32_t>(value);
}

// One strided batched cuBLASLt product and its descriptors.
struct BatchedProduct {
  int64_t a_offset = 0, b_offset = 0, y_offset = 0;  // elements, of the first batch
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, y = nullptr;  // of the row-major A, B, Y
  cublasLtMatmulAlgo_t algo{};
};

cublasLtMatrixLayout_t column_major_layout(uint64_t rows, uint64_t cols, int64_t ld,
                                           int32_t batches, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  PIPER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, rows, cols, ld));
  PIPER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                      &batches, sizeof batches));
  PIPER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  return layout;
}

// Y (+)= alpha * op(A) op(B) for every batch; with `beta` != 0, Y holds beta-scaled C first.
class GemmKernel : public PreparedKernel {
 public:
  GemmKernel(CudaContext& context, const KernelArgs& args, const MatmulShape& s, float alpha,
             float beta, const float* a, const float* b, float* y)
      : context_(context), alpha_(alpha), beta_(beta), a_(a), b_(b), y_(y) {
    try {
      if (s.m == 0 || s.n == 0 || s.k == 0) return;  // no product (k == 0: see run())
      const int32_t m = checked_int(args, s.m, "M"), n = checked_int(args, s.n, "N");
      const int32_t k = checked_int(args, s.k, "K");
      checked_int(args, std::max(s.lda, s.ldb), "the leading dimension");
      size_t first = 0;
      const size_t total = s.a_offsets.size();
      while (first < total) {
        // The longest run of batches at constant distances from `first`; an operand shared by
        // several batches (distance 0) gets a product per batch instead, as cuBLASLt does not
        // promise to read one matrix for every batch.
        size_t last = first + 1;
        const int64_t da = last < total ? s.a_offsets[last] - s.a_offsets[first] : 0;
        const int64_t db = last < total ? s.b_offsets[last] - s.b_offsets[first] : 0;
        const int64_t dy = last < total ? s.y_offsets[last] - s.y_offsets[first] : 0;
        while (last < total && da != 0 && db != 0 &&
               s.a_offsets[last] - s.a_offsets[last - 1] == da &&
               s.b_offsets[last] - s.b_offsets[last - 1] == db &&
               s.y_offsets[last] - s.y_offsets[last - 1] == dy) {
          ++last;
        }
        const int32_t batches = checked_int(args, static_cast<int64_t>(last - first), "batches");
        products_.push_back(describe(s, m, n, k, batches, da, db, dy));
        BatchedProduct& product = products_.back();
        product.a_offset = s.a_offsets[first];
        product.b_offset = s.b_offsets[first];
        product.y_offset = s.y_offsets[first];
        first = last;
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~GemmKernel() override { release(); }
  GemmKernel(const GemmKernel&) = delete;
  GemmKernel& operator=(const GemmKernel&) = delete;

  void run(const StepContext&) override {
    const Queue& queue = context_.queue();
    for (const BatchedProduct& p : products_) {
      // Column-major Yᵀ = op(B)ᵀ op(A)ᵀ: cuBLASLt's first operand is B, its second A.
      PIPER_CUBLAS_CHECK(cublasLtMatmul(context_.blas(), p.desc, &alpha_, b_ + p.b_offset, p.b,
                                        a_ + p.a_offset, p.a, &beta_, y_ + p.y_offset, p.y,
                                        y_ + p.y_offset, p.y, &p.algo, queue.workspace,
                                        queue.workspace_bytes, queue.stream));
    }
  }

 private:
  BatchedProduct describe(const MatmulShape& s, int32_t m, int32_t n, int32_t k, int32_t batches,
                          int64_t da, int64_t db, int64_t dy) {
    BatchedProduct p;
    try {
      PIPER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
      const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
      PIPER_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
      PIPER_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
      // The stored B (row-major [K, N], or [N, K] transposed) is column-major [N, K] ([K, N]).
      p.b = column_major_layout(s.trans_b ? k : n, s.trans_b ? n : k, s.ldb, batches, db);
      p.a = column_major_layout(s.trans_a ? m : k, s.trans_a ? k : m, s.lda, batches, da);
      p.y = column_major_layout(n, m, n, batches, dy);
      cublasLtMatmulPreference_t preference = nullptr;
      PIPER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
      const size_t workspace = context_.queue().workspace_bytes;
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t status = [&] {
        const cublasStatus_t set = cublasLtMatmulPreferenceSetAttribute(
            preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
        if (set != CUBLAS_STATUS_SUCCESS) return set;
        return cublasLtMatmulAlgoGetHeuristic(context_.blas(), p.desc, p.b, p.a, p.y, p.y,
                                              preference, 1, &result, &found);
      }();
      cublasLtMatmulPreferenceDestroy(preference);
      PIPER_CUBLAS_CHECK(status);
      if (found == 0) {
        throw Error("cuBLASLt has no algorithm for a float32 product of " +
                    std::to_string(batches) + " x [" + std::to_string(m) + ", " +
                    std::to_string(k) + "] by [" + std::to_string(k) + ", " + std::to_string(n) +
                    "]");
      }
      p.algo = result.algo;
    } catch (...) {
      destroy(p);
      throw;
    }
    return p;
  }

  static void destroy(BatchedProduct& p) {
    if (p.y) cublasLtMatrixLayoutDestroy(p.y);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    p = BatchedProduct{};
  }
  void release() {
    for (BatchedProduct& p : products_) destroy(p);
    products_.clear();
  }

  CudaContext& context_;
  float alpha_, beta_;
  const float* a_;
  const float* b_;
  float* y_;
  std::vector<BatchedProduct> products_;
};

void check_float(const KernelArgs& args) {
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    if (args.has_input(i)) {
      args.expect_dtype(args.input(i), plan::FLOAT32, "input " + std::to_string(i));
    }
  }
  args.expect_dtype(args.output(0), plan::FLOAT32, "output 0");
}

CudaKernelFactory matmul_factory(bool piper_op) {
  return
      [piper_op](const KernelArgs& args, CudaContext& context) -> std::unique_ptr<PreparedKernel> {
        args.expect_inputs(2, 2);
        args.expect_outputs(1, 1);
        check_float(args);
        const bool trans_a = piper_op && args.attributes().get_int("transA", 0) != 0;
        const bool trans_b = piper_op && args.attributes().get_int("transB", 0) != 0;
        const TensorView& a = args.input(0);
        const TensorView& b = args.input(1);
        const TensorView& y = args.output(0);
        const MatmulShape s = matmul_shape(args, a, b, y, trans_a, trans_b);
        if (s.k == 0 && y.elements() > 0) {  // an empty sum: zeros
          return make_kernel([&context, py = y.data, bytes = y.bytes()](const StepContext&) {
            PIPER_CUDA_CHECK(cudaMemsetAsync(py, 0, bytes, context.stream()));
          });
        }
        return std::make_unique<GemmKernel>(context, args, s, 1.0f, 0.0f, a.as<const float>(),
                                            b.as<const float>(), y.as<float>());
      };
}

// ONNX Gemm: Y = alpha * A' B' + beta * C, C broadcast unidirectionally to [M, N]: C is
// copied (scaled when K = 0) into Y, which the product then accumulates into.
std::unique_ptr<PreparedKernel> gemm_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 1);
  check_float(args);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  if (a.rank() != 2 || b.rank() != 2) {
    args.fail("A and B must be matrices, got A " + shape_string(a.shape) + " and B " +
              shape_string(b.shape));
  }
  const auto& attributes = args.attributes();
  const MatmulShape s = matmul_shape(args, a, b, y, attributes.get_int("transA", 0) != 0,
                                     attributes.get_int("transB", 0) != 0);
  const auto alpha = static_cast<float>(attributes.get_float("alpha", 1.0));
  float beta = static_cast<float>(attributes.get_float("beta", 1.0));
  const float* c = nullptr;
  StridedIndex c_index;
  if (args.has_input(2)) {
    const TensorView& ct = args.input(2);
    if (!cpu::broadcasts_to(ct.shape, y.shape)) {
      args.fail("C " + shape_string(ct.shape) + " does not broadcast to the output " +
                shape_string(y.shape));
    }
    if (beta != 0.0f) {
      c = ct.as<const float>();
      c_index = broadcast_index(y.shape, {ct.shape});
    }
  }
  if (c == nullptr) beta = 0.0f;
  std::unique_ptr<GemmKernel> product;
  if (s.k > 0) {
    product = std::make_unique<GemmKernel>(context, args, s, alpha, beta, a.as<const float>(),
                                           b.as<const float>(), y.as<float>());
  }
  std::shared_ptr<GemmKernel> shared = std::move(product);
  return make_kernel([&context, shared, c, c_index, beta, py = y.as<float>(),
                      bytes = y.bytes()](const StepContext& step) {
    const cudaStream_t stream = context.stream();
    if (c != nullptr) {
      // With K = 0 the product adds nothing: Y = beta * C.
      launch_scaled_copy(c_index, c, py, shared ? 1.0f : beta, stream);
    } else if (!shared) {
      PIPER_CUDA_CHECK(cudaMemsetAsync(py, 0, bytes, stream));
    }
    if (shared) shared->run(step);
  });
}

}  // namespace

void register_gemm_kernels(CudaKernelTable& table) {
  table["Gemm"] = gemm_factory;
  table["MatMul"] = matmul_factory(false);
  table["piper.MatMul"] = matmul_factory(true);
}

}  // namespace piper::engine::cuda
