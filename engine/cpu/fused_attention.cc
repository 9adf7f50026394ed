// piper.FusedAttention(Q, Kt, V[, Mask]) → Y[, RowMax, RowInvSum] and
// piper.FusedAttentionGrad(dY, Q, Kt, V, Mask, RowMax, RowInvSum[, Y]) → dQ, dKt, dV
// (docs/plan-format.md): scaled-dot-product attention that holds the probabilities of one
// block of query rows of one batch index at a time, never the whole [..., T, Tk] tensor.
//
// Per block: S = scale · Q Kt, masked (Mask added, or set to `fill` where a bool Mask equals
// `fill_if`), P = softmax(S) along keys, Y = P V. The forward saves each row's maximum and
// 1 / Σ exp(S − max); the backward recomputes P from them exactly as the forward had it.
// Keys that the mask leaves out of every row of a block from some key on (a causal mask's
// future) are skipped where their probabilities round to 0 in each of its rows, which leaves
// every sum with the same nonzero terms: in blocks of a quarter of the rows, 5/8 of a causal
// mask's scores are computed.
// Batch indices run in parallel on parallel.h's pool, each thread's BLAS calls on itself.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/cpu/attention_geometry.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/row_reductions.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cpu/vector_math.h"

namespace piper::engine::cpu {
namespace {

// Floats of one block of scores (query rows × keys) the kernels work on at a time.
constexpr int64_t kBlockFloats = 32768;
// Blocks of query rows at least where a mask may leave keys out: smaller blocks skip more of a
// causal mask's keys, but products of fewer rows run slower.
constexpr int64_t kMaskedBlocks = 4;
constexpr int64_t kMinBlockRows = 32;
// Floating-point operations worth handing a thread (parallel.h's grain): tens of microseconds.
constexpr int64_t kTaskFlops = int64_t{1} << 18;

int blas_dim(const KernelArgs& args, int64_t value) {
  if (value > INT32_MAX) {
    args.fail("dimension " + std::to_string(value) + " exceeds the BLAS integer range");
  }
  return static_cast<int>(value);
}

// The geometry, cut the way these kernels work: blocks of query rows, and batch indices per
// parallel task.
struct AttentionBlocks : AttentionGeometry {
  int64_t block_rows = 1;
  int64_t grain = 1;
};

AttentionBlocks attention_blocks(const KernelArgs& args, size_t first) {
  const AttentionGeometry g = attention_geometry(args, first);
  for (int64_t dim : {g.t, g.d, g.tk, g.dv}) blas_dim(args, dim);
  int64_t block_rows =
      std::clamp<int64_t>(kBlockFloats / std::max<int64_t>(g.tk, 1), 1, std::max<int64_t>(g.t, 1));
  if (g.mask != AttentionGeometry::MaskKind::kNone) {
    block_rows =
        std::min(block_rows, std::max(kMinBlockRows, (g.t + kMaskedBlocks - 1) / kMaskedBlocks));
  }
  const int64_t grain =
      std::max<int64_t>(1, kTaskFlops / std::max<int64_t>(1, 2 * g.t * g.tk * (g.d + g.dv)));
  return {g, block_rows, grain};
}

// Where the mask holds key j of query row `row` of batch index b, in elements.
int64_t mask_element(const AttentionGeometry& g, int64_t b, int64_t row, int64_t j) {
  return g.mask_offsets[b] + row * g.mask_row_stride + j * g.mask_key_stride;
}

// Whether a bool mask sets key j of query row `row` of batch index b to `fill` (its score
// then does not depend on Q or K).
bool is_filled(const AttentionGeometry& g, const void* mask, int64_t b, int64_t row, int64_t j) {
  return (static_cast<const uint8_t*>(mask)[mask_element(g, b, row, j)] != 0) == g.fill_if;
}

// The score a mask gives the keys it leaves out: `fill`, or −∞ added.
float masked_score(const AttentionGeometry& g) {
  return g.mask == AttentionGeometry::MaskKind::kFill ? g.fill
                                                      : -std::numeric_limits<float>::infinity();
}

// Whether the mask leaves key j of query row `row` of batch index b out: filled, or −∞ added.
bool is_masked(const AttentionGeometry& g, const void* mask, int64_t b, int64_t row, int64_t j) {
  if (g.mask == AttentionGeometry::MaskKind::kFill) return is_filled(g, mask, b, row, j);
  if (g.mask == AttentionGeometry::MaskKind::kNone) return false;
  return static_cast<const float*>(mask)[mask_element(g, b, row, j)] ==
         -std::numeric_limits<float>::infinity();
}

// 1 + the last key that the mask leaves in for some query row of [row, row + rows) of batch
// index b: every row of the block leaves out the keys after it. All keys where it leaves none
// in (each row's scores are then the masked score, and its probabilities not 0).
int64_t keys_left_in(const AttentionGeometry& g, const void* mask, int64_t b, int64_t row,
                     int64_t rows) {
  if (g.mask == AttentionGeometry::MaskKind::kNone) return g.tk;
  int64_t keys = 0;
  for (int64_t i = row + rows - 1; i >= row && keys < g.tk; --i) {
    for (int64_t j = g.tk - 1; j >= keys; --j) {
      if (!is_masked(g, mask, b, i, j)) {
        keys = j + 1;
        break;
      }
    }
  }
  return keys == 0 ? g.tk : keys;
}

// keys_left_in of each block of rows, worked out once a step for the batch indices that read
// batch index 0's mask (all of them where it broadcasts over the batch and heads).
class BlockKeys {
 public:
  BlockKeys(const AttentionBlocks& g, const void* mask) : g_(g), mask_(mask) {
    if (g.mask == AttentionGeometry::MaskKind::kNone || g.batch == 0) return;
    for (int64_t row = 0; row < g.t; row += g.block_rows) {
      shared_.push_back(keys_left_in(g, mask, 0, row, std::min(g.block_rows, g.t - row)));
    }
  }

  int64_t operator()(int64_t b, int64_t row, int64_t rows) const {
    if (shared_.empty()) return g_.tk;
    if (g_.mask_offsets[b] == g_.mask_offsets[0]) return shared_[row / g_.block_rows];
    return keys_left_in(g_, mask_, b, row, rows);
  }

 private:
  const AttentionBlocks& g_;
  const void* mask_;
  std::vector<int64_t> shared_;
};

// Whether the keys a mask leaves out have probability 0 in rows whose maxima (over all keys)
// are `maxima`: the masked score minus a row's maximum falls below kExpZeroBelow, where the
// softmax's exp_n gives exactly 0 (not for a row that leaves every key out, or NaN).
bool masked_keys_vanish(const AttentionGeometry& g, const float* maxima, int64_t rows) {
  const float masked = masked_score(g);
  for (int64_t i = 0; i < rows; ++i) {
    if (!(masked - maxima[i] < kExpZeroBelow)) return false;
  }
  return true;
}

// Scores S of query rows [row, row + rows) of batch index b and keys [0, keys) into s [rows, Tk],
// masked.
void block_scores(const AttentionGeometry& g, const float* q, const float* kt, const void* mask,
                  int64_t b, int64_t row, int64_t rows, int64_t keys, float* s) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(keys), static_cast<int>(g.d), g.scale, q + (b * g.t + row) * g.d,
              static_cast<int>(g.d), kt + b * g.d * g.tk, static_cast<int>(g.tk), 0.0f, s,
              static_cast<int>(g.tk));
  if (g.mask == AttentionGeometry::MaskKind::kNone) return;
  for (int64_t i = 0; i < rows; ++i) {
    float* out = s + i * g.tk;
    if (g.mask == AttentionGeometry::MaskKind::kAdd) {
      const float* m =
          static_cast<const float*>(mask) + g.mask_offsets[b] + (row + i) * g.mask_row_stride;
      for (int64_t j = 0; j < keys; ++j) out[j] += m[j * g.mask_key_stride];
    } else if (g.mask_key_stride == 1) {
      const uint8_t* m =
          static_cast<const uint8_t*>(mask) + g.mask_offsets[b] + (row + i) * g.mask_row_stride;
      const bool fill_if = g.fill_if;
      const float fill = g.fill;
      for (int64_t j = 0; j < keys; ++j) out[j] = (m[j] != 0) == fill_if ? fill : out[j];
    } else {
      for (int64_t j = 0; j < keys; ++j) {
        if (is_filled(g, mask, b, row + i, j)) out[j] = g.fill;
      }
    }
  }
}

// The scores of a block over the keys its probabilities need: keys [0, keys) (keys_left_in)
// where the others' vanish, else all keys. Writes each row's maximum over all keys to `maxima`
// and returns the keys computed.
int64_t block_scores_and_maxima(const AttentionGeometry& g, const float* q, const float* kt,
                                const void* mask, int64_t b, int64_t row, int64_t rows,
                                int64_t keys, float* s, float* maxima) {
  block_scores(g, q, kt, mask, b, row, rows, keys, s);
  for (int64_t i = 0; i < rows; ++i) {
    maxima[i] = row_maximum(s + i * g.tk, keys);
    if (keys < g.tk) maxima[i] = std::max(maxima[i], masked_score(g));
  }
  if (keys == g.tk || masked_keys_vanish(g, maxima, rows)) return keys;
  block_scores(g, q, kt, mask, b, row, rows, g.tk, s);
  for (int64_t i = 0; i < rows; ++i) maxima[i] = row_maximum(s + i * g.tk, g.tk);
  return g.tk;
}

// exp(s − max) over keys [0, keys) of a row of scores, and 0 (what exp_n gives the keys whose
// probabilities vanish) over keys [keys, Tk), so that sums over all keys add the same terms.
void shifted_exp(const AttentionGeometry& g, float* s, int64_t keys, float max) {
  for (int64_t j = 0; j < keys; ++j) s[j] -= max;
  exp_n(s, s, keys);
  std::fill(s + keys, s + g.tk, 0.0f);
}

// Runs body(b, scratch) for every batch index b, spread over parallel.h's pool; `scratch` holds
// `floats` floats of the running thread's own, reused across steps. Batch indices write
// disjoint parts of the outputs, so results do not depend on the thread count.
template <typename Body>
void for_each_batch_index(const AttentionBlocks& g, size_t floats, const Body& body) {
  parallel_for(g.batch, g.grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> buffer;
    if (buffer.size() < floats) buffer.resize(floats);
    for (int64_t b = begin; b < end; ++b) body(b, buffer.data());
  });
}

std::unique_ptr<PreparedKernel> fused_attention_factory(const KernelArgs& args) {
  args.expect_inputs(3, 4);
  args.expect_outputs(1, 3);
  const AttentionBlocks g = attention_blocks(args, 0);
  blas_on_calling_thread();
  check_attention_outputs(args, g, plan::FLOAT32, "Y (output 0)");
  float* row_max = args.has_output(1) ? args.output(1).as<float>() : nullptr;
  float* row_inv_sum = args.has_output(2) ? args.output(2).as<float>() : nullptr;
  return make_kernel([g, row_max, row_inv_sum, q = args.input(0).as<const float>(),
                      kt = args.input(1).as<const float>(), v = args.input(2).as<const float>(),
                      mask = args.has_input(3) ? args.input(3).data : nullptr,
                      py = args.output(0).as<float>()](const StepContext&) {
    const auto block = static_cast<size_t>(g.block_rows * g.tk);
    const BlockKeys block_keys(g, mask);
    for_each_batch_index(g, block + static_cast<size_t>(g.block_rows), [&](int64_t b, float* p) {
      float* maxima = p + block;
      for (int64_t row = 0; row < g.t; row += g.block_rows) {
        const int64_t rows = std::min(g.block_rows, g.t - row);
        const int64_t keys = block_scores_and_maxima(g, q, kt, mask, b, row, rows,
                                                     block_keys(b, row, rows), p, maxima);
        for (int64_t i = 0; i < rows; ++i) {
          float* s = p + i * g.tk;
          shifted_exp(g, s, keys, maxima[i]);
          const float inv = 1.0f / row_sum(s, g.tk);
          for (int64_t j = 0; j < keys; ++j) s[j] *= inv;
          if (row_max != nullptr) row_max[b * g.t + row + i] = maxima[i];
          if (row_inv_sum != nullptr) row_inv_sum[b * g.t + row + i] = inv;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                    static_cast<int>(g.dv), static_cast<int>(keys), 1.0f, p, static_cast<int>(g.tk),
                    v + b * g.tk * g.dv, static_cast<int>(g.dv), 0.0f, py + (b * g.t + row) * g.dv,
                    static_cast<int>(g.dv));
      }
    });
  });
}

// Per block, with P recomputed and dY_blk the block's rows of dY:
//   dV += Pᵀ dY_blk;  dP = dY_blk Vᵀ;  dS = P · (dP − Σ_keys dP·P), 0 where the mask filled;
//   dQ_blk = scale · dS Ktᵀ;  dKt += scale · Q_blkᵀ dS.
// Given the forward's Y, a row's Σ_keys dP·P is dY·Y: Dv products instead of Tk.
std::unique_ptr<PreparedKernel> fused_attention_grad_factory(const KernelArgs& args) {
  args.expect_inputs(7, 8);
  args.expect_outputs(1, 3);
  const AttentionBlocks g = attention_blocks(args, 1);
  blas_on_calling_thread();
  const TensorView& dy = args.input(0);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  if (dy.elements() != g.batch * g.t * g.dv) {
    args.fail("dY (input 0) has shape " + shape_string(dy.shape) + ", expected " +
              std::to_string(g.batch * g.t * g.dv) + " elements ([..., T, Dv])");
  }
  check_row_statistic(args, args.input(5), g, "RowMax (input 5)");
  check_row_statistic(args, args.input(6), g, "RowInvSum (input 6)");
  const float* y = nullptr;
  if (args.has_input(7)) {
    args.expect_dtype(args.input(7), plan::FLOAT32, "Y (input 7)");
    args.expect_same_shape(dy, "dY (input 0)", args.input(7), "Y (input 7)");
    y = args.input(7).as<const float>();
  }
  return make_kernel([g, y, dq = args.gradient_output(0, 1), dkt = args.gradient_output(1, 2),
                      dv = args.gradient_output(2, 3), pdy = dy.as<const float>(),
                      q = args.input(1).as<const float>(), kt = args.input(2).as<const float>(),
                      v = args.input(3).as<const float>(),
                      mask = args.has_input(4) ? args.input(4).data : nullptr,
                      row_max = args.input(5).as<const float>(),
                      row_inv_sum = args.input(6).as<const float>()](const StepContext&) {
    const auto block = static_cast<size_t>(g.block_rows * g.tk);
    const int tk = static_cast<int>(g.tk), d = static_cast<int>(g.d), dvn = static_cast<int>(g.dv);
    const BlockKeys block_keys(g, mask);
    for_each_batch_index(g, 2 * block, [&](int64_t b, float* p) {
      float* ds = p + block;
      const float* kt_b = kt + b * g.d * g.tk;
      const float* v_b = v + b * g.tk * g.dv;
      float* dkt_b = dkt != nullptr ? dkt + b * g.d * g.tk : nullptr;
      float* dv_b = dv != nullptr ? dv + b * g.tk * g.dv : nullptr;
      // A block that skips keys adds nothing to their rows of dV and columns of dKt: these start
      // at 0 where a mask may skip, else the first block overwrites them.
      const bool may_skip = g.mask != AttentionGeometry::MaskKind::kNone;
      if (may_skip && dkt_b != nullptr) std::fill(dkt_b, dkt_b + g.d * g.tk, 0.0f);
      if (may_skip && dv_b != nullptr) std::fill(dv_b, dv_b + g.tk * g.dv, 0.0f);
      for (int64_t row = 0; row < g.t; row += g.block_rows) {
        const int rows = static_cast<int>(std::min(g.block_rows, g.t - row));
        const float* dy_blk = pdy + (b * g.t + row) * g.dv;
        const float* q_blk = q + (b * g.t + row) * g.d;
        const float* maxima = row_max + b * g.t + row;
        const float beta = row == 0 && !may_skip ? 0.0f : 1.0f;
        int64_t keys = block_keys(b, row, rows);
        if (keys < g.tk && !masked_keys_vanish(g, maxima, rows)) keys = g.tk;
        const int n = static_cast<int>(keys);
        block_scores(g, q, kt, mask, b, row, rows, keys, p);
        for (int64_t i = 0; i < rows; ++i) {
          float* s = p + i * g.tk;
          shifted_exp(g, s, keys, maxima[i]);
          const float inv = row_inv_sum[b * g.t + row + i];
          for (int64_t j = 0; j < keys; ++j) s[j] *= inv;
        }
        if (dv_b != nullptr) {
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, dvn, rows, 1.0f, p, tk, dy_blk,
                      dvn, beta, dv_b, dvn);
        }
        if (dq == nullptr && dkt_b == nullptr) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, dvn, 1.0f, dy_blk, dvn, v_b,
                    dvn, 0.0f, ds, tk);
        for (int64_t i = 0; i < rows; ++i) {
          const float* pi = p + i * g.tk;
          float* gi = ds + i * g.tk;
          std::fill(gi + keys, gi + g.tk, 0.0f);  // dP of skipped keys, which P zeroes
          const float dot = y != nullptr
                                ? row_dot(dy_blk + i * g.dv, y + (b * g.t + row + i) * g.dv, g.dv)
                                : row_dot(gi, pi, g.tk);
          for (int64_t j = 0; j < keys; ++j) gi[j] = pi[j] * (gi[j] - dot);
          if (g.mask != AttentionGeometry::MaskKind::kFill) continue;
          if (g.mask_key_stride == 1) {
            const uint8_t* mi = static_cast<const uint8_t*>(mask) + g.mask_offsets[b] +
                                (row + i) * g.mask_row_stride;
            const bool fill_if = g.fill_if;
            for (int64_t j = 0; j < keys; ++j) gi[j] = (mi[j] != 0) == fill_if ? 0.0f : gi[j];
            continue;
          }
          for (int64_t j = 0; j < keys; ++j) {
            if (is_filled(g, mask, b, row + i, j)) gi[j] = 0.0f;
          }
        }
        if (dq != nullptr) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, d, n, g.scale, ds, tk, kt_b,
                      tk, 0.0f, dq + (b * g.t + row) * g.d, d);
        }
        if (dkt_b != nullptr) {
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, n, rows, g.scale, q_blk, d, ds,
                      tk, beta, dkt_b, tk);
        }
      }
    });
  });
}

}  // namespace

void register_fused_attention_kernels(KernelTable& table) {
  table["piper.FusedAttention"] = fused_attention_factory;
  table["piper.FusedAttentionGrad"] = fused_attention_grad_factory;
}

}  // namespace piper::engine::cpu
