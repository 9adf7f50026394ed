#include "engine/cpu/split_invariant_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/cpu/vector_math.h"

namespace piper::engine::cpu {
namespace {

// C is computed in tiles of kTileRows x kTileCols whose sums stay in registers.
constexpr int64_t kTileRows = 4;
constexpr int64_t kTileCols = 16;
// Columns of op(B) packed at a time (a multiple of kTileCols).
constexpr int64_t kPanelCols = 256;
// Halvings of K at most: K < 2^63.
constexpr int kMaxHalvings = 63;

// K as `leaves` sequential sums of `leaf` terms each, added pairwise (leaves is a power of 2).
struct SumOrder {
  int64_t leaf = 0;
  int64_t leaves = 1;
};

SumOrder sum_order(int64_t k) {
  SumOrder order{k, 1};
  while (order.leaf % 2 == 0 && order.leaf / 2 >= kSplitInvariantMinLeaf) {
    order.leaf /= 2;
    order.leaves *= 2;
  }
  return order;
}

// kTileCols floats, which GCC keeps in vector registers (one AVX-512, two AVX2 or four SSE).
typedef float Lanes __attribute__((vector_size(kTileCols * sizeof(float))));
using Tile = Lanes[kTileRows];

// S for a tile: kTileCols columns of packed op(B) (K rows of kTileCols) and kTileRows rows of
// packed op(A) (K groups of kTileRows). Each leaf's sum is pushed on a stack; after leaf t, the
// stack's top two are added while t + 1 is divisible by 2, 4, ...: sum_order's pairwise order.
PIPER_VECTOR_CLONES void sum_tile(const float* a, const float* b, SumOrder order, Tile& out) {
  Tile stack[kMaxHalvings + 1];
  int depth = 0;
  for (int64_t leaf = 0; leaf < order.leaves; ++leaf) {
    Tile acc = {};
    const int64_t first = leaf * order.leaf;
    for (int64_t kk = first; kk < first + order.leaf; ++kk) {
      Lanes b_row;
      std::memcpy(&b_row, b + kk * kTileCols, sizeof(b_row));
      const float* a_col = a + kk * kTileRows;
      for (int64_t r = 0; r < kTileRows; ++r) acc[r] += a_col[r] * b_row;
    }
    for (int64_t r = 0; r < kTileRows; ++r) stack[depth][r] = acc[r];
    ++depth;
    for (int64_t done = leaf + 1; done % 2 == 0; done /= 2) {
      --depth;
      for (int64_t r = 0; r < kTileRows; ++r) stack[depth - 1][r] += stack[depth][r];
    }
  }
  for (int64_t r = 0; r < kTileRows; ++r) out[r] = stack[0][r];
}

}  // namespace

void split_invariant_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                           float* c, int64_t ldc) {
  const SumOrder order = sum_order(k);
  const int64_t a_row = trans_a ? 1 : lda;
  const int64_t a_k = trans_a ? lda : 1;
  thread_local std::vector<float> packed, a_tile;
  for (int64_t panel = 0; panel < n; panel += kPanelCols) {
    const int64_t width = std::min(kPanelCols, n - panel);
    // op(B)'s columns [panel, panel + width) in tiles of kTileCols, each K rows of kTileCols
    // (zero beyond `width`), so that a tile's sums read it in order.
    const int64_t tiles = (width + kTileCols - 1) / kTileCols;
    packed.assign(static_cast<size_t>(std::max<int64_t>(k, 1) * tiles * kTileCols), 0.0f);
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = 0; j < width; ++j) {
        packed[((j / kTileCols) * k + kk) * kTileCols + j % kTileCols] =
            trans_b ? b[(panel + j) * ldb + kk] : b[kk * ldb + panel + j];
      }
    }
    for (int64_t i = 0; i < m; i += kTileRows) {
      const int64_t rows = std::min(kTileRows, m - i);
      // op(A)'s rows [i, i + rows) as K groups of kTileRows, zero beyond `rows`.
      a_tile.assign(static_cast<size_t>(std::max<int64_t>(k, 1) * kTileRows), 0.0f);
      for (int64_t kk = 0; kk < k; ++kk) {
        for (int64_t r = 0; r < rows; ++r)
          a_tile[kk * kTileRows + r] = a[(i + r) * a_row + kk * a_k];
      }
      for (int64_t j = 0; j < width; j += kTileCols) {
        Tile sum = {};
        if (k > 0) sum_tile(a_tile.data(), packed.data() + j * k, order, sum);
        const int64_t cols = std::min(kTileCols, width - j);
        for (int64_t r = 0; r < rows; ++r) {
          float* y = c + (i + r) * ldc + panel + j;
          for (int64_t col = 0; col < cols; ++col) {
            y[col] = beta == 0.0f ? alpha * sum[r][col] : alpha * sum[r][col] + beta * y[col];
          }
        }
      }
    }
  }
}

}  // namespace piper::engine::cpu
