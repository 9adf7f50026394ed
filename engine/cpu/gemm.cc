// Matrix products (batched_gemm.h): ONNX Gemm and MatMul, and piper.MatMul
// (MatMul with transA/transB on the last two dimensions, an optional Bias and an optional
// tanh GELU after them).
#include <algorithm>
#include <climits>
#include <cstring>

#include "engine/cpu/batched_gemm.h"
#include "engine/cpu/bias_gelu_operands.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/matmul_geometry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

int product_int(const KernelArgs& args, int64_t value, const char* what) {
  if (value > INT_MAX) {
    args.fail(
        std::string(what) + " = " + std::to_string(value) +
        " exceeds the int range of the CPU's products; split the operation into smaller ones");
  }
  return static_cast<int>(value);
}

// The GEMMs of a checked product, whose sizes must fit BatchedGemm's ints.
BatchedGemm batched_gemm(const KernelArgs& args, const MatmulGeometry& g) {
  BatchedGemm gemm;
  gemm.trans_a = g.trans_a;
  gemm.trans_b = g.trans_b;
  gemm.m = product_int(args, g.m, "M");
  gemm.n = product_int(args, g.n, "N");
  gemm.k = product_int(args, g.k, "K");
  gemm.lda = std::max(1, product_int(args, g.lda, "lda"));
  gemm.ldb = std::max(1, product_int(args, g.ldb, "ldb"));
  gemm.ldc = std::max(1, gemm.n);
  gemm.a_offsets = g.a_offsets;
  gemm.b_offsets = g.b_offsets;
  gemm.c_offsets = g.y_offsets;
  gemm.prepare();
  return gemm;
}

void check_float(const KernelArgs& args) {
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    if (args.has_input(i))
      args.expect_dtype(args.input(i), plan::FLOAT32, "input " + std::to_string(i));
  }
  args.expect_dtype(args.output(0), plan::FLOAT32, "output 0");
}

// piper.MatMul's optional Bias, which the product adds to every row of Y.
const float* bias_of(const KernelArgs& args) {
  const TensorView* bias = check_matmul_bias(args);
  return bias != nullptr ? bias->as<const float>() : nullptr;
}

std::unique_ptr<PreparedKernel> matmul_factory(const KernelArgs& args, bool piper_op) {
  args.expect_inputs(2, piper_op ? 3 : 2);
  const bool gelu = piper_op && check_matmul_activation(args);
  if (!piper_op) args.expect_outputs(1, 1);
  check_float(args);
  const bool trans_a = piper_op && args.attributes().get_int("transA", 0) != 0;
  const bool trans_b = piper_op && args.attributes().get_int("transB", 0) != 0;
  const TensorView& y = args.output(0);
  const BatchedGemm gemm =
      batched_gemm(args, matmul_geometry(args, args.input(0), args.input(1), y, trans_a, trans_b));
  const int64_t elements = y.elements();
  return make_kernel([gemm, bias = bias_of(args), gelu, elements,
                      pre = gelu && args.has_output(1) ? args.output(1).as<float>() : nullptr,
                      pa = args.input(0).as<const float>(), pb = args.input(1).as<const float>(),
                      py = y.as<float>()](const StepContext&) {
    gemm.run(pa, pb, py, 0.0f, bias);
    if (!gelu) return;
    if (pre != nullptr) std::memcpy(pre, py, elements * sizeof(float));
    gelu_tanh_n(py, py, elements);
  });
}

// ONNX Gemm: Y = alpha * A' B' + beta * C, C broadcast unidirectionally to [M, N].
std::unique_ptr<PreparedKernel> gemm_factory(const KernelArgs& args) {
  BatchedGemm gemm = batched_gemm(args, check_gemm(args));
  check_float(args);
  const TensorView& a = args.input(0);
  const TensorView& b = args.input(1);
  const TensorView& y = args.output(0);
  const auto& attributes = args.attributes();
  gemm.alpha = static_cast<float>(attributes.get_float("alpha", 1.0));
  const float beta = static_cast<float>(attributes.get_float("beta", 1.0));
  const bool has_c = args.has_input(2) && beta != 0.0f;
  StridedLoop c_loop;
  const float* pc = nullptr;
  if (args.has_input(2)) {
    const TensorView& c = args.input(2);
    c_loop =
        StridedLoop(y.shape, {contiguous_strides(y.shape), broadcast_strides(c.shape, y.shape)});
    pc = c.as<const float>();
  }
  return make_kernel([gemm, has_c, c_loop, beta, pc, pa = a.as<const float>(),
                      pb = b.as<const float>(), py = y.as<float>()](const StepContext&) {
    if (has_c) {
      const int64_t s = c_loop.inner_stride(1);
      c_loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
        for (int64_t i = 0; i < n; ++i) py[offsets[0] + i] = pc[offsets[1] + i * s];
      });
    }
    gemm.run(pa, pb, py, has_c ? beta : 0.0f);
  });
}

}  // namespace

const TensorView* check_matmul_bias(const KernelArgs& args) {
  if (!args.has_input(2)) return nullptr;
  const TensorView& bias = args.input(2);
  const TensorView& y = args.output(0);
  if (bias.rank() != 1 || y.rank() == 0 || bias.shape[0] != y.shape.back()) {
    args.fail("Bias " + shape_string(bias.shape) + " must be a vector over the last dimension of " +
              "the output " + shape_string(y.shape));
  }
  return &bias;
}

bool check_matmul_activation(const KernelArgs& args) {
  const std::string activation = args.attributes().get_string("activation", "");
  if (activation.empty()) {
    args.expect_outputs(1, 1);
    return false;
  }
  if (activation != "gelu_tanh") {
    args.fail("activation \"" + activation + "\" is not one of \"\" and \"gelu_tanh\"");
  }
  args.expect_outputs(1, 2);
  if (args.has_output(1)) {
    args.expect_dtype(args.output(1), args.output(0).dtype, "PreActivation (output 1) (Y's dtype)");
    args.expect_same_shape(args.output(0), "Y (output 0)", args.output(1),
                           "PreActivation (output 1)");
  }
  return true;
}

void register_gemm_kernels(KernelTable& table) {
  table["Gemm"] = gemm_factory;
  table["MatMul"] = [](const KernelArgs& args) { return matmul_factory(args, false); };
  table["piper.MatMul"] = [](const KernelArgs& args) { return matmul_factory(args, true); };
}

}  // namespace piper::engine::cpu
