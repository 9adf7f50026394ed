// The CPU products' order of summation (engine/cpu/split_invariant_gemm): the product, every
// element the bits of its definition whatever tile computes it, the same bits however its rows,
// columns or K are split, which OpenBLAS's GEMM does not give; and the float32 and bfloat16
// MatMul kernels compute with it.
#include <gmock/gmock.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/cpu/split_invariant_gemm.h"
#include "engine_test_util.h"

namespace piper::engine::testing {
namespace {

using cpu::split_invariant_sgemm;

std::vector<float> Random(int64_t count, uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = uniform(engine);
  return values;
}

// Whether two float arrays hold the same bits.
bool SameBits(const float* x, const float* y, int64_t count) {
  return std::memcmp(x, y, static_cast<size_t>(count) * sizeof(float)) == 0;
}

// An M x N x K product with op(A) and op(B) stored transposed where asked.
struct Product {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  std::vector<float> a, b;
  int64_t lda() const { return ta ? m : k; }
  int64_t ldb() const { return tb ? k : n; }
  float at_a(int64_t i, int64_t p) const { return ta ? a[p * m + i] : a[i * k + p]; }
  float at_b(int64_t p, int64_t j) const { return tb ? b[j * k + p] : b[p * n + j]; }

  // Rows [first, first + rows) and columns [col, col + cols) of C over K's terms [from, from +
  // terms), into c (row length ldc).
  void Run(int64_t first, int64_t rows, int64_t col, int64_t cols, int64_t from, int64_t terms,
           float beta, float* c, int64_t ldc) const {
    const float* pa = ta ? a.data() + from * m + first : a.data() + first * k + from;
    const float* pb = tb ? b.data() + col * k + from : b.data() + from * n + col;
    split_invariant_sgemm(ta, tb, rows, cols, terms, 1.0f, pa, lda(), pb, ldb(), beta, c, ldc);
  }
  std::vector<float> Whole() const {
    std::vector<float> c(static_cast<size_t>(m * n));
    Run(0, m, 0, n, 0, k, 0.0f, c.data(), n);
    return c;
  }
};

Product MakeProduct(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  Product p{ta, tb, m, n, k, Random(m * k, seed), Random(k * n, seed + 1)};
  return p;
}

TEST(CpuSplitInvariantGemm, ComputesTheProductWithAlphaAndBeta) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const int64_t k : {0, 1, 7, 24, 37, 128}) {
        const Product p = MakeProduct(ta, tb, 13, 35, k, 7);
        std::vector<float> c = Random(13 * 35, 9);
        const std::vector<float> before = c;
        split_invariant_sgemm(ta, tb, p.m, p.n, k, 0.5f, p.a.data(), p.lda(), p.b.data(), p.ldb(),
                              2.0f, c.data(), p.n);
        for (int64_t i = 0; i < p.m; ++i) {
          for (int64_t j = 0; j < p.n; ++j) {
            double sum = 0;
            for (int64_t q = 0; q < k; ++q) sum += double{p.at_a(i, q)} * p.at_b(q, j);
            const double want = 0.5 * sum + 2.0 * before[i * p.n + j];
            EXPECT_NEAR(c[i * p.n + j], want, 1e-5 * (1 + std::abs(want)))
                << "ta " << ta << " tb " << tb << " k " << k << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(CpuSplitInvariantGemm, BetaZeroDoesNotReadC) {
  const Product p = MakeProduct(false, false, 5, 6, 9, 3);
  std::vector<float> c(30, std::nanf(""));
  split_invariant_sgemm(false, false, 5, 6, 9, 1.0f, p.a.data(), 9, p.b.data(), 6, 0.0f, c.data(),
                        6);
  EXPECT_TRUE(SameBits(c.data(), p.Whole().data(), 30));
}

// A bias is added to the finished element, alpha · S + beta · C + bias, with the bits of C
// pre-filled with the bias and beta = 1, over every tile (137 x 70 cuts both edges) and over a
// call for the last 31 columns alone, which reads the bias from its own first column.
TEST(CpuSplitInvariantGemm, AddsTheBiasToTheFinishedSum) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const int64_t k : {0, 5, 96}) {
        const Product p = MakeProduct(ta, tb, 137, 70, k, 11);
        const std::vector<float> bias = Random(p.n, 13);
        std::vector<float> prefilled(static_cast<size_t>(p.m * p.n));
        for (int64_t i = 0; i < p.m; ++i) {
          std::memcpy(prefilled.data() + i * p.n, bias.data(), bias.size() * sizeof(float));
        }
        split_invariant_sgemm(ta, tb, p.m, p.n, k, 0.5f, p.a.data(), p.lda(), p.b.data(), p.ldb(),
                              1.0f, prefilled.data(), p.n);
        std::vector<float> c(prefilled.size(), std::nanf(""));
        split_invariant_sgemm(ta, tb, p.m, p.n, k, 0.5f, p.a.data(), p.lda(), p.b.data(), p.ldb(),
                              0.0f, c.data(), p.n, bias.data());
        EXPECT_TRUE(SameBits(c.data(), prefilled.data(), p.m * p.n))
            << "ta " << ta << " tb " << tb << " k " << k;
        if (k == 0) continue;  // B is empty: no column of it to start from
        const int64_t col = 39;
        std::vector<float> right(static_cast<size_t>(p.m * p.n), std::nanf(""));
        const float* pb = tb ? p.b.data() + col * k : p.b.data() + col;
        split_invariant_sgemm(ta, tb, p.m, p.n - col, k, 0.5f, p.a.data(), p.lda(), pb, p.ldb(),
                              0.0f, right.data() + col, p.n, bias.data() + col);
        for (int64_t i = 0; i < p.m; ++i) {
          EXPECT_TRUE(
              SameBits(right.data() + i * p.n + col, prefilled.data() + i * p.n + col, p.n - col))
              << "ta " << ta << " tb " << tb << " k " << k << " row " << i;
        }
      }
    }
  }
}

// S(i, j) over terms [from, from + k): halves added while k is even and a half holds at least
// kSplitInvariantMinLeaf terms, else the first product rounded and each next one added to the
// sum by a fused multiply-add.
float DefinedSum(const Product& p, int64_t i, int64_t j, int64_t from, int64_t k) {
  if (k % 2 == 0 && k / 2 >= cpu::kSplitInvariantMinLeaf) {
    return DefinedSum(p, i, j, from, k / 2) + DefinedSum(p, i, j, from + k / 2, k / 2);
  }
  float sum = p.at_a(i, from) * p.at_b(from, j);
  for (int64_t q = from + 1; q < from + k; ++q) sum = std::fma(p.at_a(i, q), p.at_b(q, j), sum);
  return sum;
}

// Every element has its definition's bits, whichever tile (full or cut by M's and N's edges),
// panel of op(B) and chunk of packed op(A) rows computes it (137 rows: more than 16 tiles of 8),
// on every instruction set's tile shape this CPU runs.
TEST(CpuSplitInvariantGemm, EveryElementIsItsDefinedSum) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const int64_t k : {1, 8, 24, 96, 255, 1100, 4096}) {
        const Product p = MakeProduct(ta, tb, 137, 70, k, 3);
        const std::vector<float> c = p.Whole();
        int64_t differing = 0;
        for (int64_t i = 0; i < p.m; ++i) {
          for (int64_t j = 0; j < p.n; ++j) {
            const float want = DefinedSum(p, i, j, 0, k);
            differing += std::memcmp(&c[i * p.n + j], &want, sizeof(float)) != 0;
          }
        }
        EXPECT_EQ(differing, 0) << "ta " << ta << " tb " << tb << " k " << k;
      }
    }
  }
}

// Every row range, at any offset, gives the rows of the whole product bit for bit (a data-
// parallel replica's rows, a thread's panel), and so does every column range (a column-parallel
// member's columns).
TEST(CpuSplitInvariantGemm, RowsAndColumnsComputedApartGiveTheSameBits) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Product p = MakeProduct(ta, tb, 70, 45, 96, 11);
      const std::vector<float> whole = p.Whole();
      for (const auto& [first, rows] : std::vector<std::pair<int64_t, int64_t>>{
               {0, 1}, {3, 5}, {8, 8}, {35, 35}, {1, 69}, {64, 6}}) {
        std::vector<float> part(static_cast<size_t>(rows * p.n));
        p.Run(first, rows, 0, p.n, 0, p.k, 0.0f, part.data(), p.n);
        EXPECT_TRUE(SameBits(part.data(), whole.data() + first * p.n, rows * p.n))
            << "ta " << ta << " tb " << tb << " rows " << first << "+" << rows;
      }
      for (const auto& [col, cols] :
           std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {5, 17}, {16, 29}, {40, 5}}) {
        std::vector<float> part(static_cast<size_t>(p.m * cols));
        p.Run(0, p.m, col, cols, 0, p.k, 0.0f, part.data(), cols);
        for (int64_t i = 0; i < p.m; ++i) {
          EXPECT_TRUE(SameBits(part.data() + i * cols, whole.data() + i * p.n + col, cols))
              << "ta " << ta << " tb " << tb << " columns " << col << "+" << cols << " row " << i;
        }
      }
    }
  }
}

// A product over K is its two halves computed apart and added (a row-parallel product's float32
// all-reduce over two members, a weight gradient's rows over two replicas), bias after the sum.
TEST(CpuSplitInvariantGemm, HalvesOfKAddedGiveTheSameBits) {
  for (const int64_t leaves : {2, 3, 8, 64}) {
    const int64_t k = leaves * cpu::kSplitInvariantMinLeaf;
    const Product p = MakeProduct(false, true, 12, 20, k, 5);
    const std::vector<float> bias = Random(20, 6);
    std::vector<float> whole(240), first(240), second(240), split(240);
    for (int64_t i = 0; i < 12; ++i) std::memcpy(&whole[i * 20], bias.data(), 20 * sizeof(float));
    p.Run(0, 12, 0, 20, 0, k, 1.0f, whole.data(), 20);
    p.Run(0, 12, 0, 20, 0, k / 2, 0.0f, first.data(), 20);
    p.Run(0, 12, 0, 20, k / 2, k / 2, 0.0f, second.data(), 20);
    for (int64_t i = 0; i < 240; ++i) split[i] = (first[i] + second[i]) + bias[i % 20];
    EXPECT_TRUE(SameBits(whole.data(), split.data(), 240)) << "k " << k;
  }
}

// A bfloat16 MatMul (computed on float32 copies) is split-invariant: its rows computed in a
// product of other rows come out the same, as one process's and a replica's do.
TEST(CpuSplitInvariantGemm, Bfloat16MatMulRowsDoNotDependOnTheRowCount) {
  const int64_t rows = 64, k = 128, n = 96, part = 24;
  KernelRunner r;
  const int a = r.Input({rows, k}, Random(rows * k, 21));
  const int b = r.Input({k, n}, Random(k * n, 22));
  const int a16 = r.Output({rows, k}, plan::BFLOAT16);
  const int b16 = r.Output({k, n}, plan::BFLOAT16);
  r.Run("Cast", {a}, {a16}, {Int("to", 16)});
  r.Run("Cast", {b}, {b16}, {Int("to", 16)});
  const int y = r.Output({rows, n});
  r.Run("MatMul", {a16, b16}, {y});
  // The rows [40, 64) alone.
  std::vector<float> a_rows = r.Floats(a);
  a_rows.erase(a_rows.begin(), a_rows.begin() + (rows - part) * k);
  const int a_part = r.Input({part, k}, a_rows);
  const int a_part16 = r.Output({part, k}, plan::BFLOAT16);
  r.Run("Cast", {a_part}, {a_part16}, {Int("to", 16)});
  const int y_part = r.Output({part, n});
  r.Run("MatMul", {a_part16, b16}, {y_part});
  const std::vector<float> whole = r.Floats(y), alone = r.Floats(y_part);
  EXPECT_TRUE(SameBits(alone.data(), whole.data() + (rows - part) * n, part * n));
}

// A float32 MatMul is split-invariant too: a replica's rows, or a tensor-parallel member's,
// come out as one process's.
TEST(CpuSplitInvariantGemm, Float32MatMulRowsDoNotDependOnTheRowCount) {
  const int64_t rows = 64, k = 96, n = 80, part = 24;
  KernelRunner r;
  const std::vector<float> a_values = Random(rows * k, 31);
  const int a = r.Input({rows, k}, a_values);
  const int b = r.Input({k, n}, Random(k * n, 32));
  const int y = r.Output({rows, n});
  r.Run("MatMul", {a, b}, {y});
  const int a_part =
      r.Input({part, k}, std::vector<float>(a_values.end() - part * k, a_values.end()));
  const int y_part = r.Output({part, n});
  r.Run("MatMul", {a_part, b}, {y_part});
  const std::vector<float> whole = r.Floats(y), alone = r.Floats(y_part);
  EXPECT_TRUE(SameBits(alone.data(), whole.data() + (rows - part) * n, part * n));
}

}  // namespace
}  // namespace piper::engine::testing
