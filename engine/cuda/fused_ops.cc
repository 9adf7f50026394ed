// The planner's fused ops on CUDA (docs/plan-format.md): piper.BiasGelu,
// piper.BiasGeluGrad, piper.FusedAttention and piper.FusedAttentionGrad. Checks follow
// engine/cpu/fused_bias_gelu.cc and fused_attention.cc. Attention runs on cuDNN's flash
// attention where cuDNN takes it (cudnn_attention.h); otherwise its products run through
// cuBLASLt and it holds the scores of a chunk of batch indices at a time (at most
// kChunkFloats), not of the whole [..., T, Tk] tensor. All four take bfloat16 tensors:
// they compute in float32 (attention's scores, softmax and score gradients included) and
// round what they write.
#include <algorithm>

#include "engine/cpu/bias_gelu_operands.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/attention.h"
#include "engine/cuda/check.h"
#include "engine/cuda/cudnn_attention.h"
#include "engine/cuda/fused.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

constexpr int64_t kChunkFloats = int64_t{16} << 20;  // 64 MiB of scores per chunk

// X as [rows, n], n the bias length (all of X without a bias), and the approximation.
struct GeluShape {
  int64_t total = 0, n = 1;
  Gelu gelu = Gelu::kErf;
};

GeluShape gelu_shape(const KernelArgs& args, const TensorView& x, size_t bias_input) {
  GeluShape shape;
  shape.gelu = cpu::check_bias_gelu(args, x, bias_input) == cpu::GeluApproximation::kTanh
                   ? Gelu::kTanh
                   : Gelu::kErf;
  shape.total = x.elements();
  shape.n = std::max<int64_t>(args.has_input(bias_input) ? x.shape.back() : shape.total, 1);
  return shape;
}

FloatView optional_input(const KernelArgs& args, size_t i) {
  return args.has_input(i) ? float_view(args.input(i)) : FloatView{};
}

// X, Bias and Y each float32 or bfloat16.
std::unique_ptr<PreparedKernel> bias_gelu_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(1, 2);
  args.expect_outputs(1, 1);
  const KernelArgs checked = float32_labelled(args);
  const GeluShape shape = gelu_shape(checked, checked.input(0), 1);
  checked.expect_dtype(checked.output(0), plan::FLOAT32, "Y (output 0)");
  checked.expect_same_shape(checked.input(0), "X (input 0)", checked.output(0), "Y (output 0)");
  return make_kernel([&context, shape, x = float_view(args.input(0)),
                      bias = optional_input(args, 1),
                      y = float_view(args.output(0))](const StepContext&) {
    launch_bias_gelu(shape.gelu, shape.total, shape.n, x, bias, y, context.stream());
  });
}

// dX = dY · GELU'(X + Bias); dBias = Σ_rows of the float32 dX (through device scratch when dX
// is omitted or bfloat16, which is then rounded from it). Each tensor float32 or bfloat16.
std::unique_ptr<PreparedKernel> bias_gelu_grad_factory(const KernelArgs& args,
                                                       CudaContext& context) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 2);
  const KernelArgs checked = float32_labelled(args);
  const TensorView& dy = checked.input(0);
  const TensorView& x = checked.input(1);
  const GeluShape shape = gelu_shape(checked, x, 2);
  checked.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  checked.expect_same_shape(dy, "dY (input 0)", x, "X (input 1)");
  const FloatView dx =
      checked.gradient_output(0, 1) != nullptr ? float_view(args.output(0)) : FloatView{};
  const FloatView dbias =
      checked.gradient_output(1, 2) != nullptr ? float_view(args.output(1)) : FloatView{};
  const bool staged = dbias.data != nullptr && (dx.data == nullptr || dx.bf16);
  std::shared_ptr<double> scratch;
  ReducePlan columns;
  if (dbias.data != nullptr) {
    const Shape matrix = {shape.total / shape.n, shape.n};
    columns = reduce_plan(cpu::ReduceFormula{}, matrix, {1, shape.n}, 1.0);
    // A staged gradient goes to scratch first (doubles hold twice the floats needed).
    const size_t partials = columns.chunks > 1 ? static_cast<size_t>(columns.chunks * shape.n) : 0;
    scratch = device_array<double>(partials + (staged ? static_cast<size_t>(shape.total) : 0));
  }
  return make_kernel([&context, shape, columns, scratch, staged, dx, dbias,
                      pdy = float_view(args.input(0)), px = float_view(args.input(1)),
                      bias = optional_input(args, 2)](const StepContext&) {
    const cudaStream_t stream = context.stream();
    double* partials = scratch.get();
    FloatView grad = dx;
    if (staged) {
      grad = FloatView{partials, false};
      partials += (shape.total + 1) / 2;
    }
    if (grad.data == nullptr) return;  // neither gradient is wanted
    launch_bias_gelu_grad(shape.gelu, shape.total, shape.n, pdy, px, bias, grad, stream);
    if (dbias.data == nullptr) return;
    launch_reduce(columns, grad, dbias, partials, stream);
    if (staged && dx.data != nullptr) {
      launch_cast(Element::kFloat32, Element::kBFloat16, shape.total, grad.data, dx.data, stream);
    }
  });
}

// The batch indices attention handles at once, within kChunkFloats of scores.
int64_t chunk_batches(const Attention& a) {
  return std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(a.t * a.tk, 1), 1,
                             std::max<int64_t>(a.batch, 1));
}

// A product over `batches` batch indices with per-batch strides of the operands' matrices;
// `s` gives the element types, TF32 and the alignment.
std::shared_ptr<StridedProduct> product(CudaContext& context, const KernelArgs& args,
                                        ProductShape s, bool trans_a, bool trans_b, int64_t m,
                                        int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                                        int64_t batches) {
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.m = m;
  s.n = n;
  s.k = k;
  s.lda = lda;
  s.ldb = ldb;
  s.ldc = ldc;
  s.batches = batches;
  s.stride_a = (trans_a ? k : m) * lda;
  s.stride_b = (trans_b ? n : k) * ldb;
  s.stride_c = m * ldc;
  return std::make_shared<StridedProduct>(context, s, args.op());
}

// The products of one chunk size (the last chunk may be shorter).
struct ChunkProducts {
  int64_t batches = 0;
  std::shared_ptr<StridedProduct> scores, out, dv, dp, dq, dkt;
};

// Scores and dP come out float32 for the row kernels; the other products take P and dS in the
// operands' type (bfloat16 operands get them rounded, as flash attention does) and write it.
ChunkProducts chunk_products(CudaContext& context, const KernelArgs& args, const Attention& a,
                             int64_t batches, bool backward) {
  ChunkProducts p;
  p.batches = batches;
  if (a.t == 0 || a.tk == 0 || batches == 0) return p;
  ProductShape typed;
  typed.ab_type = typed.c_type = a.type;
  typed.tf32 = a.tf32;
  typed.alignment = a.alignment;
  ProductShape to_float = typed;
  to_float.c_type = CUDA_R_32F;
  // S [T, Tk] = Q [T, D] Kt [D, Tk] (times scale).
  if (a.d > 0) {
    p.scores =
        product(context, args, to_float, false, false, a.t, a.tk, a.d, a.d, a.tk, a.tk, batches);
  }
  if (a.dv == 0) return p;
  if (!backward) {
    // Y [T, Dv] = P [T, Tk] V [Tk, Dv].
    p.out = product(context, args, typed, false, false, a.t, a.dv, a.tk, a.tk, a.dv, a.dv, batches);
    return p;
  }
  // dV [Tk, Dv] = Pᵀ dY; dP [T, Tk] = dY Vᵀ.
  p.dv = product(context, args, typed, true, false, a.tk, a.dv, a.t, a.tk, a.dv, a.dv, batches);
  p.dp = product(context, args, to_float, false, true, a.t, a.tk, a.dv, a.dv, a.dv, a.tk, batches);
  if (a.d > 0) {
    // dQ [T, D] = scale · dS Ktᵀ; dKt [D, Tk] = scale · Qᵀ dS.
    p.dq = product(context, args, typed, false, true, a.t, a.d, a.tk, a.tk, a.tk, a.d, batches);
    p.dkt = product(context, args, typed, true, false, a.d, a.tk, a.t, a.d, a.tk, a.tk, batches);
  }
  return p;
}

// Runs body(first batch, products) for every chunk of batch indices.
template <typename Body>
void for_each_chunk(const Attention& a, const ChunkProducts& full, const ChunkProducts& last,
                    Body body) {
  for (int64_t first = 0; first < a.batch; first += full.batches) {
    body(first, first + full.batches <= a.batch ? full : last);
  }
}

// The address `elements` elements of `bytes` past `base`.
const void* at(const void* base, int64_t elements, size_t bytes) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(bytes);
}
void* at(void* base, int64_t elements, size_t bytes) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(bytes);
}

// `count` floats of `values` rounded into `rounded` when the products take bfloat16 (`rounded`
// not null); the products' operand either way.
const void* in_product_type(const float* values, uint16_t* rounded, int64_t count,
                            cudaStream_t stream) {
  if (rounded == nullptr) return values;
  launch_cast(Element::kFloat32, Element::kBFloat16, count, values, rounded, stream);
  return rounded;
}

std::unique_ptr<PreparedKernel> fused_attention_factory(const KernelArgs& args,
                                                        CudaContext& context) {
  args.expect_inputs(3, 4);
  args.expect_outputs(1, 3);
  const Attention a = attention(args, context, 0);
  cpu::check_attention_outputs(args, a, args.input(0).dtype, "Y (output 0) (Q's dtype)");
  float* row_max = args.has_output(1) ? args.output(1).as<float>() : nullptr;
  float* row_inv_sum = args.has_output(2) ? args.output(2).as<float>() : nullptr;
  if (auto kernel = cudnn_attention(args, context, a)) return kernel;
  const int64_t chunk = chunk_batches(a);
  const ChunkProducts full = chunk_products(context, args, a, chunk, false);
  const ChunkProducts last = chunk_products(context, args, a, a.batch % chunk, false);
  const auto scores = device_array<float>(static_cast<size_t>(chunk * a.t * a.tk));
  const auto rounded =
      device_array<uint16_t>(a.type == CUDA_R_16BF ? static_cast<size_t>(chunk * a.t * a.tk) : 0);
  return make_kernel([&context, a, full, last, scores, rounded, row_max, row_inv_sum,
                      q = args.input(0).data, kt = args.input(1).data, v = args.input(2).data,
                      py = args.output(0).data](const StepContext&) {
    const cudaStream_t stream = context.stream();
    const size_t e = a.element_bytes;
    float* s = scores.get();
    if (a.t * a.dv == 0) return;
    if (a.tk == 0) {  // an empty softmax: no keys, Y = 0
      PIPER_CUDA_CHECK(cudaMemsetAsync(py, 0, a.batch * a.t * a.dv * e, stream));
      return;
    }
    for_each_chunk(a, full, last, [&](int64_t b, const ChunkProducts& p) {
      const AttentionRows rows{b, p.batches, a.t, a.tk};
      if (p.scores) {
        p.scores->run(at(q, b * a.t * a.d, e), at(kt, b * a.d * a.tk, e), s, a.scale, 0.0f);
      } else {
        PIPER_CUDA_CHECK(cudaMemsetAsync(s, 0, p.batches * a.t * a.tk * sizeof(float), stream));
      }
      launch_attention_softmax(rows, a.device_mask, s, row_max, row_inv_sum, stream);
      const void* probabilities = in_product_type(s, rounded.get(), p.batches * a.t * a.tk, stream);
      p.out->run(probabilities, at(v, b * a.tk * a.dv, e), at(py, b * a.t * a.dv, e), 1.0f, 0.0f);
    });
  });
}

// Gradient output `output` of input `input` (its dtype), or null when omitted.
void* attention_gradient(const KernelArgs& args, size_t output, size_t input) {
  if (float32_labelled(args).gradient_output(output, input) == nullptr) return nullptr;
  args.expect_dtype(
      args.output(output), args.input(input).dtype,
      "output " + std::to_string(output) + " (input " + std::to_string(input) + "'s dtype)");
  return args.output(output).data;
}

std::unique_ptr<PreparedKernel> fused_attention_grad_factory(const KernelArgs& args,
                                                             CudaContext& context) {
  args.expect_inputs(7, 8);
  args.expect_outputs(1, 3);
  const Attention a = attention(args, context, 1);
  const TensorView& dy = args.input(0);
  args.expect_dtype(dy, args.input(1).dtype, "dY (input 0) (Q's dtype)");
  if (dy.elements() != a.batch * a.t * a.dv) {
    args.fail("dY (input 0) has shape " + shape_string(dy.shape) + ", expected " +
              std::to_string(a.batch * a.t * a.dv) + " elements ([..., T, Dv])");
  }
  cpu::check_row_statistic(args, args.input(5), a, "RowMax (input 5)");
  cpu::check_row_statistic(args, args.input(6), a, "RowInvSum (input 6)");
  if (args.has_input(7)) {
    args.expect_dtype(args.input(7), dy.dtype, "Y (input 7) (dY's dtype)");
    args.expect_same_shape(dy, "dY (input 0)", args.input(7), "Y (input 7)");
    if (auto kernel = cudnn_attention_grad(args, context, a)) return kernel;
  }
  const int64_t chunk = chunk_batches(a);
  const ChunkProducts full = chunk_products(context, args, a, chunk, true);
  const ChunkProducts last = chunk_products(context, args, a, a.batch % chunk, true);
  // P and dS of one chunk, and either rounded to bfloat16 for bfloat16 products.
  const size_t chunk_scores = static_cast<size_t>(chunk * a.t * a.tk);
  const auto probabilities = device_array<float>(chunk_scores);
  const auto score_grads = device_array<float>(chunk_scores);
  const auto rounded = device_array<uint16_t>(a.type == CUDA_R_16BF ? chunk_scores : 0);
  return make_kernel(
      [&context, a, full, last, probabilities, score_grads, rounded,
       dq = attention_gradient(args, 0, 1), dkt = attention_gradient(args, 1, 2),
       dv = attention_gradient(args, 2, 3), pdy = dy.data, q = args.input(1).data,
       kt = args.input(2).data, v = args.input(3).data, row_max = args.input(5).as<const float>(),
       row_inv_sum = args.input(6).as<const float>(),
       outputs = RowOutputs{float_view(dy), optional_input(args, 7), a.dv}](const StepContext&) {
        const cudaStream_t stream = context.stream();
        const size_t e = a.element_bytes;
        // Gradients the products do not reach (empty dimensions) are zero.
        for (auto [out, count] :
             {std::pair{dq, a.batch * a.t * a.d}, std::pair{dkt, a.batch * a.d * a.tk},
              std::pair{dv, a.batch * a.tk * a.dv}}) {
          if (out != nullptr && count > 0 && (a.t == 0 || a.tk == 0 || a.dv == 0 || a.d == 0)) {
            PIPER_CUDA_CHECK(cudaMemsetAsync(out, 0, count * e, stream));
          }
        }
        if (a.t == 0 || a.tk == 0 || a.dv == 0) return;
        float* p = probabilities.get();
        float* ds = score_grads.get();
        for_each_chunk(a, full, last, [&](int64_t b, const ChunkProducts& c) {
          const AttentionRows rows{b, c.batches, a.t, a.tk};
          const int64_t count = c.batches * a.t * a.tk;
          const void* dy_b = at(pdy, b * a.t * a.dv, e);
          if (c.scores) {
            c.scores->run(at(q, b * a.t * a.d, e), at(kt, b * a.d * a.tk, e), p, a.scale, 0.0f);
          } else {
            PIPER_CUDA_CHECK(cudaMemsetAsync(p, 0, count * sizeof(float), stream));
          }
          launch_attention_probabilities(rows, a.device_mask, p, row_max, row_inv_sum, stream);
          if (dv != nullptr) {
            c.dv->run(in_product_type(p, rounded.get(), count, stream), dy_b,
                      at(dv, b * a.tk * a.dv, e), 1.0f, 0.0f);
          }
          if (dq == nullptr && dkt == nullptr) return;
          c.dp->run(dy_b, at(v, b * a.tk * a.dv, e), ds, 1.0f, 0.0f);
          launch_attention_score_grad(rows, a.device_mask, p, ds, outputs, stream);
          const void* ds_b = in_product_type(ds, rounded.get(), count, stream);
          if (dq != nullptr && c.dq)
            c.dq->run(ds_b, at(kt, b * a.d * a.tk, e), at(dq, b * a.t * a.d, e), a.scale, 0.0f);
          if (dkt != nullptr && c.dkt)
            c.dkt->run(at(q, b * a.t * a.d, e), ds_b, at(dkt, b * a.d * a.tk, e), a.scale, 0.0f);
        });
      });
}

}  // namespace

void register_fused_kernels(CudaKernelTable& table) {
  table["piper.BiasGelu"] = bias_gelu_factory;
  table["piper.BiasGeluGrad"] = bias_gelu_grad_factory;
  table["piper.FusedAttention"] = fused_attention_factory;
  table["piper.FusedAttentionGrad"] = fused_attention_grad_factory;
}

}  // namespace piper::engine::cuda
