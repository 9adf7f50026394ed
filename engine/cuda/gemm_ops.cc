// Matrix products on CUDA through cuBLASLt (engine/cuda/gemm.h): ONNX Gemm and
// MatMul, and piper.MatMul (MatMul with transA/transB on the last two dimensions, an
// optional Bias and an optional tanh GELU: cuBLASLt epilogues), in float32 (TF32 with the
// attribute tf32 = 1) or bfloat16.
// Batches (numpy broadcasting) become strided batched products, one per run of
// batches whose operands sit at constant distances.
#include "engine/cpu/matmul_geometry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/fused.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

// A checked product's geometry (engine/cpu/matmul_geometry.h) with its batches folded into a
// single taller product where they share B and A's batches are stacked contiguously.
cpu::MatmulGeometry folded(cpu::MatmulGeometry s) {
  const auto batches = static_cast<int64_t>(s.a_offsets.size());
  bool fold = batches > 1 && !s.trans_a;
  for (int64_t i = 0; fold && i < batches; ++i) {
    fold = s.b_offsets[i] == 0 && s.a_offsets[i] == i * s.m * s.k;
  }
  if (fold) {
    s.m *= batches;
    s.a_offsets = s.b_offsets = s.y_offsets = {0};
  }
  return s;
}

// What cuBLASLt's epilogue does after the product: adds `bias` (Y's dtype, Y's last
// dimension) to every row; applies GELU (tanh approximation), first writing its input to
// `gelu_input` (laid out as Y) when that is not null.
struct Epilogue {
  const void* bias = nullptr;
  bool gelu = false;
  void* gelu_input = nullptr;
};

// Y (+)= alpha * op(A) op(B) for every batch, as runs of batches at constant distances, each
// one strided product, then the epilogue; with `beta` != 0, Y holds beta-scaled C first. A and
// B are float32 or bfloat16, Y float32 or (with bfloat16 A and B) bfloat16; float32 products
// run in TF32 when the kernel's attribute tf32 is 1.
class GemmKernel : public PreparedKernel {
 public:
  GemmKernel(CudaContext& context, const KernelArgs& args, const cpu::MatmulGeometry& s,
             float alpha, float beta, const TensorView& a, const TensorView& b, const TensorView& y,
             const Epilogue& epilogue = {})
      : alpha_(alpha),
        beta_(beta),
        a_(static_cast<const char*>(a.data)),
        b_(static_cast<const char*>(b.data)),
        y_(static_cast<char*>(y.data)) {
    if (s.m == 0 || s.n == 0 || s.k == 0) return;  // nothing to add (callers handle K = 0)
    const auto ab_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    const auto y_bytes = static_cast<int64_t>(dtype_size(y.dtype));
    const size_t total = s.a_offsets.size();
    for (size_t first = 0; first < total;) {
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
      const int64_t a_offset = s.a_offsets[first] * ab_bytes;
      const int64_t b_offset = s.b_offsets[first] * ab_bytes;
      const int64_t y_offset = s.y_offsets[first] * y_bytes;
      ProductShape shape;
      shape.trans_a = s.trans_a;
      shape.trans_b = s.trans_b;
      shape.m = s.m;
      shape.n = s.n;
      shape.k = s.k;
      shape.lda = s.lda;
      shape.ldb = s.ldb;
      shape.ldc = s.n;
      shape.batches = static_cast<int64_t>(last - first);
      shape.stride_a = da;
      shape.stride_b = db;
      shape.stride_c = dy;
      shape.ab_type = blas_type(a.dtype);
      shape.c_type = blas_type(y.dtype);
      shape.tf32 = args.attributes().get_int("tf32", 0) != 0;
      shape.alignment = common_alignment(
          {address(a_ + a_offset), address(b_ + b_offset), address(y_ + y_offset)});
      shape.bias = epilogue.bias;
      shape.gelu = epilogue.gelu;
      if (epilogue.gelu_input != nullptr) {
        shape.gelu_input = static_cast<char*>(epilogue.gelu_input) + y_offset;
      }
      runs_.push_back({a_offset, b_offset, y_offset,
                       std::make_unique<StridedProduct>(context, shape, args.op())});
      first = last;
    }
  }

  void run(const StepContext&) override {
    for (const Run& r : runs_) {
      r.product->run(a_ + r.a_offset, b_ + r.b_offset, y_ + r.y_offset, alpha_, beta_);
    }
  }

 private:
  struct Run {
    int64_t a_offset, b_offset, y_offset;  // bytes, to the run's first batch
    std::unique_ptr<StridedProduct> product;
  };

  float alpha_, beta_;
  const char* a_;
  const char* b_;
  char* y_;
  std::vector<Run> runs_;
};

// A, B (and Gemm's C or piper.MatMul's Bias) and Y: all float32 or all bfloat16, except that a
// bfloat16 product may write a float32 Y (the planner's weight-gradient products).
void check_floats(const KernelArgs& args) {
  const plan::DType dtype = args.input(0).dtype;
  expect_float(args, args.input(0), "input 0");
  for (size_t i = 1; i < args.num_inputs(); ++i) {
    if (args.has_input(i)) {
      args.expect_dtype(args.input(i), dtype, "input " + std::to_string(i) + " (input 0's dtype)");
    }
  }
  const TensorView& y = args.output(0);
  if (y.dtype != plan::FLOAT32) {
    args.expect_dtype(y, dtype, "output 0 (input 0's dtype)");
  }
}

// The product with `epilogue` in cuBLASLt, or null where cuBLASLt has no algorithm for it (the
// shapes, alignments or dtypes) or K = 0.
std::unique_ptr<PreparedKernel> product_with_epilogue(const KernelArgs& args, CudaContext& context,
                                                      const cpu::MatmulGeometry& s,
                                                      const Epilogue& epilogue) {
  const TensorView* bias = cpu::check_matmul_bias(args);
  if (s.k == 0 || (bias != nullptr && bias->dtype != args.output(0).dtype)) return nullptr;
  try {
    return std::make_unique<GemmKernel>(context, args, s, 1.0f, 0.0f, args.input(0), args.input(1),
                                        args.output(0), epilogue);
  } catch (const Error&) {
    return nullptr;  // the callers' unfused kernels always work
  }
}

// piper.MatMul's optional Bias added by cuBLASLt's bias epilogue; where cuBLASLt has no such
// algorithm (or the bias's dtype is not Y's), copied into every row of Y before the product
// accumulates into it.
std::unique_ptr<PreparedKernel> matmul_with_bias(const KernelArgs& args, CudaContext& context,
                                                 const cpu::MatmulGeometry& s) {
  const TensorView& bias = *cpu::check_matmul_bias(args);
  const TensorView& y = args.output(0);
  if (auto fused = product_with_epilogue(args, context, s, Epilogue{bias.data})) return fused;
  std::shared_ptr<GemmKernel> product;
  if (s.k > 0) {
    product =
        std::make_shared<GemmKernel>(context, args, s, 1.0f, 1.0f, args.input(0), args.input(1), y);
  }
  return make_kernel([&context, product, index = broadcast_index(y.shape, {bias.shape}),
                      fb = float_view(bias), fy = float_view(y)](const StepContext& step) {
    launch_scaled_copy(index, fb, fy, 1.0f, context.stream());
    if (product) product->run(step);
  });
}

// The product (and bias) without an activation.
std::unique_ptr<PreparedKernel> product(const KernelArgs& args, CudaContext& context,
                                        const cpu::MatmulGeometry& s) {
  if (args.has_input(2)) return matmul_with_bias(args, context, s);
  const TensorView& y = args.output(0);
  if (s.k == 0 && y.elements() > 0) {  // an empty sum: zeros
    return make_kernel([&context, py = y.data, bytes = y.bytes()](const StepContext&) {
      PIPER_CUDA_CHECK(cudaMemsetAsync(py, 0, bytes, context.stream()));
    });
  }
  return std::make_unique<GemmKernel>(context, args, s, 1.0f, 0.0f, args.input(0), args.input(1),
                                      y);
}

// GELU by cuBLASLt's epilogue (the tanh approximation, as the attribute asks), which also
// writes PreActivation; where cuBLASLt has no such algorithm, the product (and bias) into Y,
// copied into PreActivation, then Piper's GELU kernel over Y.
std::unique_ptr<PreparedKernel> matmul_with_gelu(const KernelArgs& args, CudaContext& context,
                                                 const cpu::MatmulGeometry& s) {
  const TensorView* bias = cpu::check_matmul_bias(args);
  const TensorView& y = args.output(0);
  void* pre = args.has_output(1) ? args.output(1).data : nullptr;
  const Epilogue gelu{bias != nullptr ? bias->data : nullptr, true, pre};
  if (auto fused = product_with_epilogue(args, context, s, gelu)) return fused;
  return make_kernel(
      [&context, product = std::shared_ptr<PreparedKernel>(product(args, context, s)), pre,
       fy = float_view(y), total = y.elements(), bytes = y.bytes()](const StepContext& step) {
        product->run(step);
        const cudaStream_t stream = context.stream();
        if (pre != nullptr) {
          PIPER_CUDA_CHECK(cudaMemcpyAsync(pre, fy.data, bytes, cudaMemcpyDeviceToDevice, stream));
        }
        launch_bias_gelu(Gelu::kTanh, total, 1, fy, FloatView{}, fy, stream);
      });
}

CudaKernelFactory matmul_factory(bool piper_op) {
  return
      [piper_op](const KernelArgs& args, CudaContext& context) -> std::unique_ptr<PreparedKernel> {
        args.expect_inputs(2, piper_op ? 3 : 2);
        const bool gelu = piper_op && cpu::check_matmul_activation(args);
        if (!piper_op) args.expect_outputs(1, 1);
        check_floats(args);
        const bool trans_a = piper_op && args.attributes().get_int("transA", 0) != 0;
        const bool trans_b = piper_op && args.attributes().get_int("transB", 0) != 0;
        const cpu::MatmulGeometry s = folded(cpu::matmul_geometry(
            args, args.input(0), args.input(1), args.output(0), trans_a, trans_b));
        return gelu ? matmul_with_gelu(args, context, s) : product(args, context, s);
      };
}

// ONNX Gemm: Y = alpha * A' B' + beta * C, C broadcast unidirectionally to [M, N]: C is
// copied (scaled when K = 0) into Y, which the product then accumulates into.
std::unique_ptr<PreparedKernel> gemm_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::MatmulGeometry s = folded(cpu::check_gemm(args));
  check_floats(args);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  const auto& attributes = args.attributes();
  const auto alpha = static_cast<float>(attributes.get_float("alpha", 1.0));
  float beta = static_cast<float>(attributes.get_float("beta", 1.0));
  FloatView c;
  StridedIndex c_index;
  if (args.has_input(2)) {
    const TensorView& ct = args.input(2);
    if (beta != 0.0f) {
      c = float_view(ct);
      c_index = broadcast_index(y.shape, {ct.shape});
    }
  }
  if (c.data == nullptr) beta = 0.0f;
  std::shared_ptr<GemmKernel> product;
  if (s.k > 0) product = std::make_shared<GemmKernel>(context, args, s, alpha, beta, a, b, y);
  return make_kernel([&context, product, c, c_index, beta, fy = float_view(y),
                      bytes = y.bytes()](const StepContext& step) {
    const cudaStream_t stream = context.stream();
    if (c.data != nullptr) {
      // With K = 0 the product adds nothing: Y = beta * C.
      launch_scaled_copy(c_index, c, fy, product ? 1.0f : beta, stream);
    } else if (!product) {
      PIPER_CUDA_CHECK(cudaMemsetAsync(fy.data, 0, bytes, stream));
    }
    if (product) product->run(step);
  });
}

}  // namespace

void register_gemm_kernels(CudaKernelTable& table) {
  table["Gemm"] = gemm_factory;
  table["MatMul"] = matmul_factory(false);
  table["piper.MatMul"] = matmul_factory(true);
}

}  // namespace piper::engine::cuda
