#include "engine/cpu/split_invariant_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace piper::engine::cpu {
namespace {

// Columns of op(B) packed at a time at most (a multiple of every tile's width), and the packed
// panel's size at most, so that it stays in a core's L2 cache while every row tile reads it.
constexpr int64_t kPanelCols = 256;
constexpr int64_t kPanelFloats = int64_t{1} << 16;
// Column tiles of a panel above which a transposed op(A) is packed rather than read in place.
constexpr int64_t kPackedTiles = 4;
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

// split_invariant_sgemm's operands.
struct Product {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
};

// The product in tiles of Rows x (Vectors · Width) elements of C whose sums stay in registers,
// Width floats to a vector register. The tile's shape changes only the speed, never a bit:
// every element is summed in sum_order's order. Each instruction set gets a tile whose sums
// fill half its registers (run_avx512 and the others below): enough independent additions to
// keep the adders busy.
template <int64_t Rows, int64_t Vectors, int64_t Width>
struct TiledProduct {
  typedef float Lanes __attribute__((vector_size(Width * sizeof(float))));
  static constexpr int64_t Cols = Vectors * Width;
  struct Tile {
    Lanes v[Rows][Vectors];
  };

  // S for a tile: Cols columns of packed op(B) (K rows of Cols) and Rows rows of op(A), the
  // value of row r and term kk at a[r · row_step + kk · term_step]. After leaf t, the sums of the
  // leaves before it that sum_order adds to it (one for each time 2 divides t + 1) are popped from
  // a stack and added, then the result is pushed: sum_order's pairwise order, with the running sum
  // in registers.
  [[gnu::always_inline]] static inline void sum(const float* a, int64_t row_step, int64_t term_step,
                                                const float* b, SumOrder order, Tile& out) {
    Tile stack[kMaxHalvings + 1];
    int depth = 0;
    for (int64_t leaf = 0; leaf < order.leaves; ++leaf) {
      const int64_t first = leaf * order.leaf;
      Tile acc;
      multiply(a + first * term_step, row_step, b + first * Cols, acc);
      for (int64_t kk = first + 1; kk < first + order.leaf; ++kk) {
        Tile terms;
        multiply(a + kk * term_step, row_step, b + kk * Cols, terms);
        add(terms, acc);
      }
      for (int64_t done = leaf + 1; done % 2 == 0; done /= 2) add(stack[--depth], acc);
      stack[depth++] = acc;
    }
    out = stack[0];
  }

  // The products of one term of K: a column of Rows values of op(A) times a row of Cols of op(B).
  [[gnu::always_inline]] static inline void multiply(const float* a_col, int64_t row_step,
                                                     const float* b_row, Tile& out) {
#pragma GCC unroll 4
    for (int64_t v = 0; v < Vectors; ++v) {
      Lanes b_vector;
      std::memcpy(&b_vector, b_row + v * Width, sizeof(b_vector));
#pragma GCC unroll 16
      for (int64_t r = 0; r < Rows; ++r) out.v[r][v] = a_col[r * row_step] * b_vector;
    }
  }

  // into += x, element by element (x + y = y + x exactly, so the sum's order is the pairs').
  [[gnu::always_inline]] static inline void add(const Tile& x, Tile& into) {
#pragma GCC unroll 16
    for (int64_t r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
      for (int64_t v = 0; v < Vectors; ++v) into.v[r][v] += x.v[r][v];
    }
  }

  // op(B)'s columns [panel, panel + width) in tiles of Cols, each K rows of Cols (zero beyond
  // `width`), so that a tile's sums read it in order. Reads along op(B)'s stored rows.
  [[gnu::always_inline]] static inline void pack_b(const Product& p, int64_t panel, int64_t width,
                                                   std::vector<float>& packed) {
    const int64_t tiles = (width + Cols - 1) / Cols;
    packed.assign(static_cast<size_t>(p.k * tiles * Cols), 0.0f);
    for (int64_t j = 0; j < width; j += Cols) {
      float* tile = packed.data() + j * p.k;
      const int64_t cols = std::min(Cols, width - j);
      if (p.trans_b) {
        for (int64_t col = 0; col < cols; ++col) {
          const float* from = p.b + (panel + j + col) * p.ldb;
          for (int64_t kk = 0; kk < p.k; ++kk) tile[kk * Cols + col] = from[kk];
        }
      } else {
        for (int64_t kk = 0; kk < p.k; ++kk)
          std::memcpy(tile + kk * Cols, p.b + kk * p.ldb + panel + j, cols * sizeof(float));
      }
    }
  }

  // op(A)'s rows [i, i + rows) as K groups of Rows, zero beyond `rows`. Reads along op(A)'s
  // stored rows.
  [[gnu::always_inline]] static inline void pack_a(const Product& p, int64_t i, int64_t rows,
                                                   std::vector<float>& a_tile) {
    a_tile.assign(static_cast<size_t>(p.k * Rows), 0.0f);
    if (p.trans_a) {
      for (int64_t kk = 0; kk < p.k; ++kk) {
        for (int64_t r = 0; r < rows; ++r) a_tile[kk * Rows + r] = p.a[kk * p.lda + i + r];
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const float* from = p.a + (i + r) * p.lda;
        for (int64_t kk = 0; kk < p.k; ++kk) a_tile[kk * Rows + r] = from[kk];
      }
    }
  }

  // alpha · S + beta · C into C's `rows` x `cols` elements at y (beta = 0 does not read C):
  // whole vectors where the tile is whole, which round as the elements one by one.
  [[gnu::always_inline]] static inline void store(const Product& p, const Tile& s, float* y,
                                                  int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y + r * p.ldc;
      if (cols == Cols) {
        for (int64_t v = 0; v < Vectors; ++v) {
          Lanes out = p.alpha * s.v[r][v];
          if (p.beta != 0.0f) {
            Lanes before;
            std::memcpy(&before, row + v * Width, sizeof(before));
            out = out + p.beta * before;
          }
          std::memcpy(row + v * Width, &out, sizeof(out));
        }
        continue;
      }
      for (int64_t col = 0; col < cols; ++col) {
        const float sum = s.v[r][col / Width][col % Width];
        row[col] = p.beta == 0.0f ? p.alpha * sum : p.alpha * sum + p.beta * row[col];
      }
    }
  }

  [[gnu::always_inline]] static inline void run(const Product& p) {
    const SumOrder order = sum_order(p.k);
    thread_local std::vector<float> packed, a_tile;
    const int64_t panel_cols = std::clamp(kPanelFloats / p.k / Cols * Cols, Cols, kPanelCols);
    for (int64_t panel = 0; panel < p.n; panel += panel_cols) {
      const int64_t width = std::min(panel_cols, p.n - panel);
      pack_b(p, panel, width, packed);
      for (int64_t i = 0; i < p.m; i += Rows) {
        const int64_t rows = std::min(Rows, p.m - i);
        // A whole tile of op(A)'s rows is read where it is stored unless it is transposed and
        // the panel has more than kPackedTiles tiles to read it: packing it for every panel
        // cost a fifth of the time where K is large (and panels narrow), while a transposed
        // tile read in place takes a cache line a term.
        const bool in_place = rows == Rows && (!p.trans_a || width <= kPackedTiles * Cols);
        if (!in_place) pack_a(p, i, rows, a_tile);
        for (int64_t j = 0; j < width; j += Cols) {
          Tile s;
          if (in_place && p.trans_a) {
            sum(p.a + i, 1, p.lda, packed.data() + j * p.k, order, s);
          } else if (in_place) {
            sum(p.a + i * p.lda, p.lda, 1, packed.data() + j * p.k, order, s);
          } else {
            sum(a_tile.data(), 1, Rows, packed.data() + j * p.k, order, s);
          }
          store(p, s, p.c + i * p.ldc + panel + j, rows, std::min(Cols, width - j));
        }
      }
    }
  }
};

// One instantiation per instruction set, chosen at the first call: each needs its own tile,
// which one body multiversioned with target_clones (PIPER_VECTOR_CLONES) cannot give.
#if defined(__x86_64__) && defined(__GNUC__)
// 16 of the 32 AVX-512 registers hold the sums (8 rows of two registers).
__attribute__((target("avx512f"))) void run_avx512(const Product& p) {
  TiledProduct<8, 2, 16>::run(p);
}
// 8 of the 16 AVX2 registers.
__attribute__((target("avx2"))) void run_avx2(const Product& p) { TiledProduct<4, 2, 8>::run(p); }
#endif
// 8 of the 16 SSE registers.
void run_baseline(const Product& p) { TiledProduct<4, 2, 4>::run(p); }

}  // namespace

void split_invariant_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                           float* c, int64_t ldc) {
  const Product product{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return run_avx512(product);
  if (avx2) return run_avx2(product);
#endif
  run_baseline(product);
}

}  // namespace piper::engine::cpu
