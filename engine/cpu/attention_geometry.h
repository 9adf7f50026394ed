// The operands of piper.FusedAttention and piper.FusedAttentionGrad, checked and laid out
// once for every backend (engine/cpu/fused_attention.cc, engine/cuda/fused_ops.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

// Q [..., T, D], Kt [..., D, Tk], V [..., Tk, Dv] with equal leading dimensions (`batch` in
// all), and the mask read through element offsets per batch index and strides over rows and
// keys (0 where it broadcasts).
struct AttentionGeometry {
  int64_t batch = 1;  // product of the leading dimensions
  int64_t t = 0, d = 0, tk = 0, dv = 0;
  float scale = 1;
  enum class MaskKind { kNone, kAdd, kFill } mask = MaskKind::kNone;
  float fill = 0;
  bool fill_if = true;
  std::vector<int64_t> mask_offsets;
  int64_t mask_row_stride = 0, mask_key_stride = 0;
};

// Checks Q, Kt, V (inputs first..first+2) and the optional mask (input first+3); fails naming
// the operand at fault.
AttentionGeometry attention_geometry(const KernelArgs& args, size_t first);

// Checks a per-query-row statistic (RowMax, RowInvSum): float32, one value per query row.
void check_row_statistic(const KernelArgs& args, const TensorView& stats,
                         const AttentionGeometry& g, const std::string& what);

// piper.FusedAttention's outputs: Y (output 0) of Q's shape but the last dimension dv, in
// `y_dtype`, and the optional float32 RowMax (output 1) and RowInvSum (output 2), one value per
// query row.
void check_attention_outputs(const KernelArgs& args, const AttentionGeometry& g,
                             plan::DType y_dtype, const std::string& y_what);

}  // namespace piper::engine::cpu
