// The planner's fused ops on CUDA (docs/plan-format.md): piper.BiasGelu,
// piper.BiasGeluGrad, piper.FusedAttention and piper.FusedAttentionGrad. Checks follow
// engine/cpu/fused_bias_gelu.cc and fused_attention.cc. Attention runs its products through
// cuBLASLt and holds the scores of a chunk of batch indices at a time (at most
// kChunkFloats), not of the whole [..., T, Tk] tensor.
#include <algorithm>

#include "engine/cpu/attention_geometry.h"
#include "engine/cpu/bias_gelu_operands.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
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

const float* optional_input(const KernelArgs& args, size_t i) {
  return args.has_input(i) ? args.input(i).as<const float>() : nullptr;
}

std::unique_ptr<PreparedKernel> bias_gelu_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(1, 2);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const GeluShape shape = gelu_shape(args, x, 1);
  args.expect_dtype(args.output(0), plan::FLOAT32, "Y (output 0)");
  args.expect_same_shape(x, "X (input 0)", args.output(0), "Y (output 0)");
  return make_kernel([&context, shape, px = x.as<const float>(), bias = optional_input(args, 1),
                      py = args.output(0).as<float>()](const StepContext&) {
    launch_bias_gelu(shape.gelu, shape.total, shape.n, px, bias, py, context.stream());
  });
}

// dX = dY · GELU'(X + Bias); dBias = Σ_rows dX (through device scratch when dX is omitted).
std::unique_ptr<PreparedKernel> bias_gelu_grad_factory(const KernelArgs& args,
                                                       CudaContext& context) {
  args.expect_inputs(2, 3);
  args.expect_outputs(1, 2);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
  const GeluShape shape = gelu_shape(args, x, 2);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_same_shape(dy, "dY (input 0)", x, "X (input 1)");
  float* dx = args.gradient_output(0, 1);
  float* dbias = args.gradient_output(1, 2);
  std::shared_ptr<double> scratch;
  ReducePlan columns;
  if (dbias != nullptr) {
    const Shape matrix = {shape.total / shape.n, shape.n};
    columns = reduce_plan(Fold::kSum, matrix, {1, shape.n}, 1.0);
    // Without dX the gradient goes to scratch first (doubles hold twice the floats needed).
    const size_t partials = columns.chunks > 1 ? static_cast<size_t>(columns.chunks * shape.n) : 0;
    scratch = device_doubles(partials + (dx == nullptr ? static_cast<size_t>(shape.total) : 0));
  }
  return make_kernel([&context, shape, columns, scratch, dx, dbias, pdy = dy.as<const float>(),
                      px = x.as<const float>(),
                      bias = optional_input(args, 2)](const StepContext&) {
    const cudaStream_t stream = context.stream();
    double* partials = scratch.get();
    float* grad = dx;
    if (grad == nullptr) {
      grad = reinterpret_cast<float*>(partials);
      partials += (shape.total + 1) / 2;
    }
    launch_bias_gelu_grad(shape.gelu, shape.total, shape.n, pdy, px, bias, grad, stream);
    if (dbias != nullptr) launch_reduce(columns, grad, dbias, partials, stream);
  });
}

// The shared geometry, with the mask's per-batch offsets in device memory.
struct Attention : cpu::AttentionGeometry {
  AttentionMask device_mask;  // the mask as the kernels read it
  std::shared_ptr<int64_t> mask_offsets_on_device;
};

Attention attention(const KernelArgs& args, CudaContext& context, size_t first) {
  Attention a{cpu::attention_geometry(args, first), {}, {}};
  using MaskKind = cpu::AttentionGeometry::MaskKind;
  if (a.mask == MaskKind::kNone) return a;
  a.device_mask.kind =
      a.mask == MaskKind::kFill ? AttentionMask::Kind::kFill : AttentionMask::Kind::kAdd;
  a.device_mask.fill = a.fill;
  a.device_mask.fill_if = a.fill_if;
  a.device_mask.row_stride = a.mask_row_stride;
  a.device_mask.key_stride = a.mask_key_stride;
  int64_t* device = nullptr;
  PIPER_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), a.mask_offsets.size() * 8 + 8));
  a.mask_offsets_on_device = std::shared_ptr<int64_t>(device, [](int64_t* p) { cudaFree(p); });
  copy_to_device(context, device, a.mask_offsets.data(), a.mask_offsets.size() * 8);
  a.device_mask.data = args.input(first + 3).data;
  a.device_mask.offsets = device;
  return a;
}

// The batch indices attention handles at once, within kChunkFloats of scores.
int64_t chunk_batches(const Attention& a) {
  return std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(a.t * a.tk, 1), 1,
                             std::max<int64_t>(a.batch, 1));
}

// A product over `batches` batch indices with per-batch strides of the operands' matrices.
std::shared_ptr<StridedProduct> product(CudaContext& context, const KernelArgs& args, bool trans_a,
                                        bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
                                        int64_t ldb, int64_t ldc, int64_t batches) {
  ProductShape s;
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

ChunkProducts chunk_products(CudaContext& context, const KernelArgs& args, const Attention& a,
                             int64_t batches, bool backward) {
  ChunkProducts p;
  p.batches = batches;
  if (a.t == 0 || a.tk == 0 || batches == 0) return p;
  // S [T, Tk] = Q [T, D] Kt [D, Tk] (times scale).
  if (a.d > 0)
    p.scores = product(context, args, false, false, a.t, a.tk, a.d, a.d, a.tk, a.tk, batches);
  if (a.dv == 0) return p;
  if (!backward) {
    // Y [T, Dv] = P [T, Tk] V [Tk, Dv].
    p.out = product(context, args, false, false, a.t, a.dv, a.tk, a.tk, a.dv, a.dv, batches);
    return p;
  }
  // dV [Tk, Dv] = Pᵀ dY; dP [T, Tk] = dY Vᵀ.
  p.dv = product(context, args, true, false, a.tk, a.dv, a.t, a.tk, a.dv, a.dv, batches);
  p.dp = product(context, args, false, true, a.t, a.tk, a.dv, a.dv, a.dv, a.tk, batches);
  if (a.d > 0) {
    // dQ [T, D] = scale · dS Ktᵀ; dKt [D, Tk] = scale · Qᵀ dS.
    p.dq = product(context, args, false, true, a.t, a.d, a.tk, a.tk, a.tk, a.d, batches);
    p.dkt = product(context, args, true, false, a.d, a.tk, a.t, a.d, a.tk, a.tk, batches);
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

std::unique_ptr<PreparedKernel> fused_attention_factory(const KernelArgs& args,
                                                        CudaContext& context) {
  args.expect_inputs(3, 4);
  args.expect_outputs(1, 3);
  const Attention a = attention(args, context, 0);
  const TensorView& y = args.output(0);
  args.expect_dtype(y, plan::FLOAT32, "Y (output 0)");
  Shape expected(args.input(0).shape.begin(), args.input(0).shape.end() - 1);
  expected.push_back(a.dv);
  if (y.shape != expected) {
    args.fail("Y (output 0) has shape " + shape_string(y.shape) + ", expected " +
              shape_string(expected));
  }
  float* row_max = nullptr;
  float* row_inv_sum = nullptr;
  if (args.has_output(1)) {
    cpu::check_row_statistic(args, args.output(1), a, "RowMax (output 1)");
    row_max = args.output(1).as<float>();
  }
  if (args.has_output(2)) {
    cpu::check_row_statistic(args, args.output(2), a, "RowInvSum (output 2)");
    row_inv_sum = args.output(2).as<float>();
  }
  const int64_t chunk = chunk_batches(a);
  const ChunkProducts full = chunk_products(context, args, a, chunk, false);
  const ChunkProducts last = chunk_products(context, args, a, a.batch % chunk, false);
  const std::shared_ptr<double> scores =
      device_doubles(static_cast<size_t>(chunk * a.t * a.tk) / 2 + 1);
  return make_kernel([&context, a, full, last, scores, row_max, row_inv_sum,
                      q = args.input(0).as<const float>(), kt = args.input(1).as<const float>(),
                      v = args.input(2).as<const float>(), py = y.as<float>()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    auto* s = reinterpret_cast<float*>(scores.get());
    if (a.t * a.dv == 0) return;
    if (a.tk == 0) {  // an empty softmax: no keys, Y = 0
      PIPER_CUDA_CHECK(cudaMemsetAsync(py, 0, a.batch * a.t * a.dv * sizeof(float), stream));
      return;
    }
    for_each_chunk(a, full, last, [&](int64_t b, const ChunkProducts& p) {
      const AttentionRows rows{b, p.batches, a.t, a.tk};
      if (p.scores) {
        p.scores->run(q + b * a.t * a.d, kt + b * a.d * a.tk, s, a.scale, 0.0f);
      } else {
        PIPER_CUDA_CHECK(cudaMemsetAsync(s, 0, p.batches * a.t * a.tk * sizeof(float), stream));
      }
      launch_attention_softmax(rows, a.device_mask, s, row_max, row_inv_sum, stream);
      p.out->run(s, v + b * a.tk * a.dv, py + b * a.t * a.dv, 1.0f, 0.0f);
    });
  });
}

std::unique_ptr<PreparedKernel> fused_attention_grad_factory(const KernelArgs& args,
                                                             CudaContext& context) {
  args.expect_inputs(7, 7);
  args.expect_outputs(1, 3);
  const Attention a = attention(args, context, 1);
  const TensorView& dy = args.input(0);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  if (dy.elements() != a.batch * a.t * a.dv) {
    args.fail("dY (input 0) has shape " + shape_string(dy.shape) + ", expected " +
              std::to_string(a.batch * a.t * a.dv) + " elements ([..., T, Dv])");
  }
  cpu::check_row_statistic(args, args.input(5), a, "RowMax (input 5)");
  cpu::check_row_statistic(args, args.input(6), a, "RowInvSum (input 6)");
  const int64_t chunk = chunk_batches(a);
  const ChunkProducts full = chunk_products(context, args, a, chunk, true);
  const ChunkProducts last = chunk_products(context, args, a, a.batch % chunk, true);
  // P and dP of one chunk.
  const std::shared_ptr<double> scratch =
      device_doubles(static_cast<size_t>(chunk * a.t * a.tk) + 1);
  return make_kernel([&context, a, full, last, scratch, dq = args.gradient_output(0, 1),
                      dkt = args.gradient_output(1, 2), dv = args.gradient_output(2, 3),
                      pdy = dy.as<const float>(), q = args.input(1).as<const float>(),
                      kt = args.input(2).as<const float>(), v = args.input(3).as<const float>(),
                      row_max = args.input(5).as<const float>(),
                      row_inv_sum = args.input(6).as<const float>()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    // Gradients the products do not reach (empty dimensions) are zero.
    for (auto [out, count] :
         {std::pair{dq, a.batch * a.t * a.d}, std::pair{dkt, a.batch * a.d * a.tk},
          std::pair{dv, a.batch * a.tk * a.dv}}) {
      if (out != nullptr && count > 0 && (a.t == 0 || a.tk == 0 || a.dv == 0 || a.d == 0)) {
        PIPER_CUDA_CHECK(cudaMemsetAsync(out, 0, count * sizeof(float), stream));
      }
    }
    if (a.t == 0 || a.tk == 0 || a.dv == 0) return;
    auto* p = reinterpret_cast<float*>(scratch.get());
    float* ds = p + full.batches * a.t * a.tk;
    for_each_chunk(a, full, last, [&](int64_t b, const ChunkProducts& c) {
      const AttentionRows rows{b, c.batches, a.t, a.tk};
      const float* dy_b = pdy + b * a.t * a.dv;
      if (c.scores) {
        c.scores->run(q + b * a.t * a.d, kt + b * a.d * a.tk, p, a.scale, 0.0f);
      } else {
        PIPER_CUDA_CHECK(cudaMemsetAsync(p, 0, c.batches * a.t * a.tk * sizeof(float), stream));
      }
      launch_attention_probabilities(rows, a.device_mask, p, row_max, row_inv_sum, stream);
      if (dv != nullptr) c.dv->run(p, dy_b, dv + b * a.tk * a.dv, 1.0f, 0.0f);
      if (dq == nullptr && dkt == nullptr) return;
      c.dp->run(dy_b, v + b * a.tk * a.dv, ds, 1.0f, 0.0f);
      launch_attention_score_grad(rows, a.device_mask, p, ds, stream);
      if (dq != nullptr && c.dq)
        c.dq->run(ds, kt + b * a.d * a.tk, dq + b * a.t * a.d, a.scale, 0.0f);
      if (dkt != nullptr && c.dkt)
        c.dkt->run(q + b * a.t * a.d, ds, dkt + b * a.d * a.tk, a.scale, 0.0f);
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
