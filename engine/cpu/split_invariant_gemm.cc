#include "engine/cpu/split_invariant_gemm.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

namespace piper::engine::cpu {
namespace {

// Columns of op(B) packed at a time at most (a multiple of every tile's width), and the packed
// panel's size at most, so that it stays in a core's L2 cache while every row tile reads it.
constexpr int64_t kPanelCols = 256;
constexpr int64_t kPanelFloats = int64_t{1} << 16;
// A tile's share of a packed panel at most (terms x Cols floats, 16 KiB): with its rows of op(A)
// it stays in a core's L1 cache while the tile sums them.
constexpr int64_t kBlockFloats = int64_t{1} << 12;
// Column tiles of a panel above which a transposed op(A) is packed rather than read in place.
constexpr int64_t kPackedTiles = 4;
// Row tiles of a transposed op(A) packed at a time.
constexpr int64_t kChunkTiles = 16;
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

// K as `count` blocks of `terms` terms (count a power of 2), each summed in `order`, whose sums
// are added pairwise: sum_order's pairs, each block a subtree of them, blocks of at most
// `max_terms` terms where the leaves allow.
struct Blocks {
  SumOrder order;
  int64_t terms = 0;
  int64_t count = 1;
};

Blocks blocks_of(SumOrder order, int64_t max_terms) {
  Blocks blocks{order, order.leaf * order.leaves, 1};
  while (blocks.order.leaves > 1 && blocks.terms > max_terms) {
    blocks.order.leaves /= 2;
    blocks.terms /= 2;
    blocks.count *= 2;
  }
  return blocks;
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
  const float* bias;  // over C's columns, or null
};

// sum += x · y lane by lane, rounded once: one fused multiply-add per vector register of each
// instruction set's tile. Their own functions, so that each can take its instruction set's
// target; the run_* function of that set inlines them (flatten).
typedef float Floats4 __attribute__((vector_size(4 * sizeof(float))));
void fused_multiply_add(const Floats4& x, const Floats4& y, Floats4& sum) {
  for (int lane = 0; lane < 4; ++lane) sum[lane] = __builtin_fmaf(x[lane], y[lane], sum[lane]);
}
#if defined(__x86_64__) && defined(__GNUC__)
typedef float Floats8 __attribute__((vector_size(8 * sizeof(float))));
typedef float Floats16 __attribute__((vector_size(16 * sizeof(float))));
__attribute__((target("avx2,fma"))) void fused_multiply_add(const Floats8& x, const Floats8& y,
                                                            Floats8& sum) {
  sum = __builtin_ia32_vfmaddps256(x, y, sum);
}
__attribute__((target("avx512f"))) void fused_multiply_add(const Floats16& x, const Floats16& y,
                                                           Floats16& sum) {
  // All lanes (mask -1), in the current rounding mode (4: _MM_FROUND_CUR_DIRECTION).
  sum = __builtin_ia32_vfmaddps512_mask(x, y, sum, -1, 4);
}
#endif

// The product in tiles of Rows x (Vectors · Width) elements of C whose sums stay in registers,
// Width floats to a vector register. The tile's shape changes only the speed, never a bit:
// every element is summed in sum_order's order. Each instruction set gets a tile with enough
// independent sums to keep its fused multiply-adds busy and registers left for a term's row of
// op(B) and value of op(A) (run_avx512 and the others below).
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
      const float* a_leaf = a + leaf * order.leaf * term_step;
      const float* b_leaf = b + leaf * order.leaf * Cols;
      Tile acc;
      multiply(a_leaf, row_step, b_leaf, acc);
      for (int64_t kk = 1; kk < order.leaf; ++kk) {
        multiply_add(a_leaf + kk * term_step, row_step, b_leaf + kk * Cols, acc);
      }
      for (int64_t done = leaf + 1; done % 2 == 0; done /= 2) add(stack[--depth], acc);
      copy(acc, stack[depth++]);
    }
    copy(stack[0], out);
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

  // acc += the products of one term, each added as it is formed (one rounding a product).
  [[gnu::always_inline]] static inline void multiply_add(const float* a_col, int64_t row_step,
                                                         const float* b_row, Tile& acc) {
    Lanes b_vectors[Vectors];
#pragma GCC unroll 4
    for (int64_t v = 0; v < Vectors; ++v) {
      std::memcpy(&b_vectors[v], b_row + v * Width, sizeof(Lanes));
    }
#pragma GCC unroll 16
    for (int64_t r = 0; r < Rows; ++r) {
      float a_values[Width];
#pragma GCC unroll 16
      for (int64_t lane = 0; lane < Width; ++lane) a_values[lane] = a_col[r * row_step];
      Lanes a_value;
      std::memcpy(&a_value, a_values, sizeof(a_value));
#pragma GCC unroll 4
      for (int64_t v = 0; v < Vectors; ++v) fused_multiply_add(a_value, b_vectors[v], acc.v[r][v]);
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

  // to = x a vector at a time (a Tile's assignment is a memcpy the compiler may call).
  [[gnu::always_inline]] static inline void copy(const Tile& x, Tile& to) {
#pragma GCC unroll 16
    for (int64_t r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
      for (int64_t v = 0; v < Vectors; ++v) to.v[r][v] = x.v[r][v];
    }
  }

  // A tile's sums to and from Rows · Cols floats of a buffer, which need not be aligned as a Tile.
  [[gnu::always_inline]] static inline void save(const Tile& x, float* to) {
#pragma GCC unroll 16
    for (int64_t r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
      for (int64_t v = 0; v < Vectors; ++v) {
        std::memcpy(to + (r * Vectors + v) * Width, &x.v[r][v], sizeof(Lanes));
      }
    }
  }
  [[gnu::always_inline]] static inline void add_saved(const float* from, Tile& into) {
#pragma GCC unroll 16
    for (int64_t r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
      for (int64_t v = 0; v < Vectors; ++v) {
        Lanes x;
        std::memcpy(&x, from + (r * Vectors + v) * Width, sizeof(x));
        into.v[r][v] += x;
      }
    }
  }

  // op(B)'s columns [panel, panel + width) and its rows [first, first + terms) in tiles of Cols,
  // each `terms` rows of Cols (zero beyond `width`), so that a tile's sums read it in order.
  // Reads along op(B)'s stored rows (a row of the panel at a time where they are op(B)'s rows:
  // down a column of tiles, each row would be another page).
  [[gnu::always_inline]] static inline void pack_b(const Product& p, int64_t first, int64_t terms,
                                                   int64_t panel, int64_t width,
                                                   std::vector<float>& packed) {
    const int64_t whole = width / Cols * Cols;
    packed.resize(static_cast<size_t>(terms * ((width + Cols - 1) / Cols) * Cols));
    if (whole < width) std::fill(packed.begin() + whole * terms, packed.end(), 0.0f);
    if (p.trans_b) {
      for (int64_t col = 0; col < width; ++col) {
        const float* from = p.b + (panel + col) * p.ldb + first;
        float* to = packed.data() + col / Cols * Cols * terms + col % Cols;
        for (int64_t kk = 0; kk < terms; ++kk) to[kk * Cols] = from[kk];
      }
      return;
    }
    for (int64_t kk = 0; kk < terms; ++kk) {
      const float* from = p.b + (first + kk) * p.ldb + panel;
      for (int64_t j = 0; j < whole; j += Cols) {
        std::memcpy(packed.data() + j * terms + kk * Cols, from + j, Cols * sizeof(float));
      }
      if (whole < width) {
        std::memcpy(packed.data() + whole * terms + kk * Cols, from + whole,
                    (width - whole) * sizeof(float));
      }
    }
  }

  // op(A)'s rows [i, i + rows) over terms [first, first + terms) as tiles of Rows rows, each
  // `terms` groups of Rows values (zero beyond `rows`). Reads along op(A)'s stored rows: where
  // op(A) is transposed, a stored row's `rows` values a term, so that each cache line is read once
  // and not once for each tile it holds values of (which took a sixth of a weight gradient's time).
  [[gnu::always_inline]] static inline void pack_a(const Product& p, int64_t i, int64_t rows,
                                                   int64_t first, int64_t terms,
                                                   std::vector<float>& a_tiles) {
    const int64_t tile_floats = terms * Rows;
    const int64_t whole = rows / Rows;
    a_tiles.resize(static_cast<size_t>((rows + Rows - 1) / Rows * tile_floats));
    if (whole * Rows < rows) {
      float* last = a_tiles.data() + whole * tile_floats;
      for (int64_t kk = 0; kk < terms; ++kk) {
        std::fill(last + kk * Rows + rows % Rows, last + (kk + 1) * Rows, 0.0f);
      }
    }
    if (p.trans_a) {
      for (int64_t kk = 0; kk < terms; ++kk) {
        const float* from = p.a + (first + kk) * p.lda + i;
        float* to = a_tiles.data() + kk * Rows;
        for (int64_t t = 0; t < whole; ++t) {
          std::memcpy(to + t * tile_floats, from + t * Rows, Rows * sizeof(float));
        }
        if (whole * Rows < rows) {
          std::memcpy(to + whole * tile_floats, from + whole * Rows,
                      (rows - whole * Rows) * sizeof(float));
        }
      }
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* from = p.a + (i + r) * p.lda + first;
      float* to = a_tiles.data() + r / Rows * tile_floats + r % Rows;
      for (int64_t kk = 0; kk < terms; ++kk) to[kk * Rows] = from[kk];
    }
  }

  // Asks for share `part` of `parts` of the cache lines of Rows rows of `terms` floats at `rows`,
  // `row_step` floats apart: the next row tile's op(A) where it is read in place, a share while
  // each of this tile's column tiles is summed, so that it comes from memory in time (hardware
  // prefetchers follow one stream a row; the products' operands are often fresh from DRAM).
  [[gnu::always_inline]] static inline void prefetch_share(const float* rows, int64_t row_step,
                                                           int64_t terms, int64_t part,
                                                           int64_t parts) {
    constexpr int64_t kLineFloats = 16;
    const int64_t lines = (terms + kLineFloats - 1) / kLineFloats;
    for (int64_t r = 0; r < Rows; ++r) {
      for (int64_t l = part * lines / parts; l < (part + 1) * lines / parts; ++l) {
        __builtin_prefetch(rows + r * row_step + l * kLineFloats);
      }
    }
  }

  // alpha · S + beta · C + bias into C's `rows` x `cols` elements at column `col0` of row y
  // (beta = 0 does not read C): whole vectors where the tile is whole, which round as the
  // elements one by one.
  [[gnu::always_inline]] static inline void store(const Product& p, const Tile& s, float* y,
                                                  int64_t col0, int64_t rows, int64_t cols) {
    const float* bias = p.bias != nullptr ? p.bias + col0 : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y + r * p.ldc + col0;
      if (cols == Cols) {
        for (int64_t v = 0; v < Vectors; ++v) {
          Lanes out = p.alpha * s.v[r][v];
          if (p.beta != 0.0f) {
            Lanes before;
            std::memcpy(&before, row + v * Width, sizeof(before));
            out = out + p.beta * before;
          }
          if (bias != nullptr) {
            Lanes added;
            std::memcpy(&added, bias + v * Width, sizeof(added));
            out = out + added;
          }
          std::memcpy(row + v * Width, &out, sizeof(out));
        }
        continue;
      }
      for (int64_t col = 0; col < cols; ++col) {
        float out = p.alpha * s.v[r][col / Width][col % Width];
        if (p.beta != 0.0f) out = out + p.beta * row[col];
        if (bias != nullptr) out = out + bias[col];
        row[col] = out;
      }
    }
  }

  // Adds to block `block`'s sum of a tile the sums of the blocks before it that sum_order adds to
  // it, as sum() does for leaves, from `pending` (the tile's saved sum at depth d at
  // pending[d · depth_step + offset]); then saves the result there and returns true, or returns
  // false where it is the last block's, the tile's whole sum. With one block, `pending` may be
  // empty.
  [[gnu::always_inline]] static inline bool add_pending(const Blocks& blocks, int64_t block,
                                                        std::vector<float>& pending, int64_t offset,
                                                        int64_t depth_step, Tile& s) {
    int64_t depth = std::popcount(uint64_t(block));
    for (int64_t done = block + 1; done % 2 == 0; done /= 2) {
      add_saved(pending.data() + --depth * depth_step + offset, s);
    }
    if (block + 1 == blocks.count) return false;
    save(s, pending.data() + depth * depth_step + offset);
    return true;
  }

  // The product a panel of op(B)'s columns at a time and, within it, a block of K's terms at a
  // time (blocks_of), so that the tiles of a block read op(B) from the L1 cache: each tile's
  // block sum is added to those of the blocks before it as the leaves' are (sum), through
  // `pending` (the sums not yet added, by depth and tile) instead of registers.
  [[gnu::always_inline]] static inline void run(const Product& p) {
    const Blocks blocks = blocks_of(sum_order(p.k), kBlockFloats / Cols);
    thread_local std::vector<float> packed, a_tiles;
    thread_local std::vector<float> pending;
    const int64_t panel_cols =
        std::clamp(kPanelFloats / blocks.terms / Cols * Cols, Cols, kPanelCols);
    const int64_t panel_tiles = (p.m + Rows - 1) / Rows * (panel_cols / Cols);
    pending.resize(
        static_cast<size_t>(std::countr_zero(uint64_t(blocks.count)) * panel_tiles * Rows * Cols));
    for (int64_t panel = 0; panel < p.n; panel += panel_cols) {
      const int64_t width = std::min(panel_cols, p.n - panel);
      // A transposed op(A) is packed kChunkTiles row tiles at a time unless the panel has at most
      // kPackedTiles tiles to read it (packing it for every panel cost a fifth of the time where
      // K is large and panels narrow, while a transposed tile read in place takes a cache line a
      // term); otherwise op(A) is read where it is stored but for a last partial tile.
      const bool pack_chunks = p.trans_a && width > kPackedTiles * Cols;
      for (int64_t block = 0; block < blocks.count; ++block) {
        const int64_t first = block * blocks.terms;
        pack_b(p, first, blocks.terms, panel, width, packed);
        for (int64_t chunk = 0; chunk < p.m; chunk += kChunkTiles * Rows) {
          const int64_t chunk_rows = std::min(kChunkTiles * Rows, p.m - chunk);
          if (pack_chunks) pack_a(p, chunk, chunk_rows, first, blocks.terms, a_tiles);
          for (int64_t i = chunk; i < chunk + chunk_rows; i += Rows) {
            const int64_t rows = std::min(Rows, p.m - i);
            const float* a_packed = nullptr;
            if (pack_chunks) {
              a_packed = a_tiles.data() + (i - chunk) / Rows * blocks.terms * Rows;
            } else if (rows < Rows) {
              pack_a(p, i, rows, first, blocks.terms, a_tiles);
              a_packed = a_tiles.data();
            }
            const bool prefetch = !p.trans_a && i + 2 * Rows <= p.m;
            for (int64_t j = 0; j < width; j += Cols) {
              const float* b_tile = packed.data() + j * blocks.terms;
              if (prefetch) {
                prefetch_share(p.a + (i + Rows) * p.lda + first, p.lda, blocks.terms, j / Cols,
                               (width + Cols - 1) / Cols);
              }
              Tile s;
              if (a_packed != nullptr) {
                sum(a_packed, 1, Rows, b_tile, blocks.order, s);
              } else if (p.trans_a) {
                sum(p.a + first * p.lda + i, 1, p.lda, b_tile, blocks.order, s);
              } else {
                sum(p.a + i * p.lda + first, p.lda, 1, b_tile, blocks.order, s);
              }
              const int64_t tile = i / Rows * (panel_cols / Cols) + j / Cols;
              if (!add_pending(blocks, block, pending, tile * Rows * Cols,
                               panel_tiles * Rows * Cols, s)) {
                store(p, s, p.c + i * p.ldc, panel + j, rows, std::min(Cols, width - j));
              }
            }
          }
        }
      }
    }
  }
};

// One instantiation per instruction set, chosen at the first call: each needs its own tile,
// which one body multiversioned with target_clones (PIPER_VECTOR_CLONES) cannot give.
#if defined(__x86_64__) && defined(__GNUC__)
// 16 of the 32 AVX-512 registers hold the sums (8 rows of two registers).
__attribute__((target("avx512f"), flatten)) void run_avx512(const Product& p) {
  TiledProduct<8, 2, 16>::run(p);
}
// 12 of the 16 AVX2 registers: a fused multiply-add takes 5 cycles on Zen 2 and 4 on Haswell,
// two issue a cycle, so fewer than 10 independent sums would leave the units idle.
__attribute__((target("avx2,fma"), flatten)) void run_avx2(const Product& p) {
  TiledProduct<6, 2, 8>::run(p);
}
#endif
// 8 of the 16 SSE registers; without a fused multiply-add instruction each lane's is a call.
__attribute__((flatten)) void run_baseline(const Product& p) { TiledProduct<4, 2, 4>::run(p); }

}  // namespace

void split_invariant_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                           float* c, int64_t ldc, const float* bias) {
  const Product product{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias};
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float& out = c[i * ldc + j];
        out = beta == 0.0f ? 0.0f : beta * out;
        if (bias != nullptr) out = out + bias[j];
      }
    }
    return;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512) return run_avx512(product);
  if (avx2) return run_avx2(product);
#endif
  run_baseline(product);
}

}  // namespace piper::engine::cpu
