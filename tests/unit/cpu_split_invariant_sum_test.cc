// The row sums' split-invariant order (engine/cpu/split_invariant_sum.h): a sum over rows equals,
// bit for bit, its two halves summed apart and then added (a 2-replica all-reduce), and
// microbatch quarters added pairwise; and the kernels whose sums data parallelism splits along
// the batch rows (piper.SumTo and ReduceSum, LayerNormalizationGrad's dScale and dBias,
// GatherGrad's scatter-add, BiasGeluGrad's dBias) give one call's bits from two halves.
#include <gmock/gmock.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/cpu/split_invariant_sum.h"
#include "engine_test_util.h"

namespace piper::engine::testing {
namespace {

using cpu::split_invariant_sums;

// Floats over several binades, so that the order of summation shows in the last bits.
std::vector<float> Spread(int64_t count, uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = std::ldexp(mantissa(engine), exponent(engine));
  return values;
}

// Whether two float arrays hold the same bits.
bool SameBits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The column sums of rows [first, first + rows) of `x` (row length `columns`).
std::vector<float> ColumnSums(const std::vector<float>& x, int64_t first, int64_t rows,
                              int64_t columns) {
  std::vector<float> sums(static_cast<size_t>(columns));
  split_invariant_sums(rows, columns, sums.data(), [&](int64_t r, float* acc) {
    const float* in = x.data() + (first + r) * columns;
    for (int64_t c = 0; c < columns; ++c) acc[c] += in[c];
  });
  return sums;
}

std::vector<float> Added(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  return sum;
}

TEST(CpuSplitInvariantSum, LeafIsTheOddPart) {
  EXPECT_EQ(cpu::split_invariant_leaf(128), 1);
  EXPECT_EQ(cpu::split_invariant_leaf(80), 5);
  EXPECT_EQ(cpu::split_invariant_leaf(7), 7);
  EXPECT_EQ(cpu::split_invariant_leaf(0), 0);
}

TEST(CpuSplitInvariantSum, HalvesAddedGiveTheWholeBitForBit) {
  constexpr int64_t kColumns = 37;
  for (int64_t rows : {2, 6, 8, 10, 20, 40, 64, 80, 96, 128, 160, 256}) {
    const std::vector<float> x = Spread(rows * kColumns, static_cast<uint32_t>(rows));
    const std::vector<float> whole = ColumnSums(x, 0, rows, kColumns);
    const int64_t half = rows / 2;
    EXPECT_TRUE(SameBits(
        whole, Added(ColumnSums(x, 0, half, kColumns), ColumnSums(x, half, half, kColumns))))
        << rows << " rows";
    if (rows % 4 == 0) {
      const int64_t q = rows / 4;
      const std::vector<float> pairs =
          Added(Added(ColumnSums(x, 0, q, kColumns), ColumnSums(x, q, q, kColumns)),
                Added(ColumnSums(x, 2 * q, q, kColumns), ColumnSums(x, 3 * q, q, kColumns)));
      EXPECT_TRUE(SameBits(whole, pairs)) << rows << " rows in quarters";
    }
    // The sums are sums: within float32's rounding of the exact (double) ones.
    for (int64_t c = 0; c < kColumns; ++c) {
      double exact = 0.0, magnitude = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        exact += x[static_cast<size_t>(r * kColumns + c)];
        magnitude += std::fabs(x[static_cast<size_t>(r * kColumns + c)]);
      }
      EXPECT_NEAR(whole[static_cast<size_t>(c)], exact, 1e-6 * magnitude) << rows << ", " << c;
    }
  }
}

TEST(CpuSplitInvariantSum, IsNotTheRowsInTurn) {
  // What the order is for: adding the rows one after the other gives other bits than adding a
  // replica's half to the other's, for some column.
  constexpr int64_t kRows = 128, kColumns = 64;
  const std::vector<float> x = Spread(kRows * kColumns, 7);
  const std::vector<float> whole = ColumnSums(x, 0, kRows, kColumns);
  std::vector<float> in_turn(kColumns, 0.0f), halves(kColumns, 0.0f);
  for (int64_t c = 0; c < kColumns; ++c) {
    float first = 0.0f, second = 0.0f;
    for (int64_t r = 0; r < kRows; ++r) {
      in_turn[static_cast<size_t>(c)] += x[static_cast<size_t>(r * kColumns + c)];
      (r < kRows / 2 ? first : second) += x[static_cast<size_t>(r * kColumns + c)];
    }
    halves[static_cast<size_t>(c)] = first + second;
  }
  EXPECT_FALSE(SameBits(in_turn, halves));
  EXPECT_TRUE(SameBits(whole, Added(ColumnSums(x, 0, kRows / 2, kColumns),
                                    ColumnSums(x, kRows / 2, kRows / 2, kColumns))));
}

// The rows [first, first + count) of a row-major tensor of `shape` (its leading dimension).
std::vector<float> LeadingRows(const std::vector<float>& x, const Shape& shape, int64_t first,
                               int64_t count) {
  const int64_t row = num_elements(shape) / shape[0];
  return {x.begin() + first * row, x.begin() + (first + count) * row};
}

Shape WithLeading(Shape shape, int64_t leading) {
  shape[0] = leading;
  return shape;
}

// Runs a one-output kernel on x (and `more` inputs that do not split) whole and on x's two
// halves along its leading dimension, expecting the halves' outputs added to equal the whole's.
void ExpectHalvesAddUp(const std::string& op, const Shape& x_shape, const Shape& y_shape,
                       const std::vector<plan::Attribute>& attributes = {}) {
  const std::vector<float> x = Spread(num_elements(x_shape), 3);
  const auto run = [&](const Shape& shape, const std::vector<float>& values) {
    KernelRunner r;
    const int in = r.Input(shape, values);
    const int out = r.Output(y_shape);
    r.Run(op, {in}, {out}, attributes);
    return r.Floats(out);
  };
  const int64_t half = x_shape[0] / 2;
  const Shape half_shape = WithLeading(x_shape, half);
  EXPECT_TRUE(
      SameBits(run(x_shape, x), Added(run(half_shape, LeadingRows(x, x_shape, 0, half)),
                                      run(half_shape, LeadingRows(x, x_shape, half, half)))))
      << op << " of " << shape_string(x_shape) << " to " << shape_string(y_shape);
}

TEST(CpuSplitInvariantSum, SumToAndReduceSumSplitAlongTheBatch) {
  ExpectHalvesAddUp("piper.SumTo", {8, 16, 32}, {32});           // a bias gradient
  ExpectHalvesAddUp("piper.SumTo", {8, 16, 32}, {16, 32});       // a position embedding's
  ExpectHalvesAddUp("piper.SumTo", {8, 4, 10, 32}, {4, 1, 32});  // experts' biases
  ExpectHalvesAddUp("piper.SumTo", {2, 4, 10, 32}, {4, 1, 32});  // one row per replica
  ExpectHalvesAddUp("piper.SumTo", {8, 3, 5}, {});               // a sum of everything
  ExpectHalvesAddUp("ReduceSum", {8, 16, 4}, {1, 16, 1}, {Ints("axes", {0, 2})});
}

TEST(CpuSplitInvariantSum, LayerNormalizationGradSplitsAlongTheRows) {
  constexpr int64_t kRows = 96, kN = 40;
  const std::vector<float> dy = Spread(kRows * kN, 1), x = Spread(kRows * kN, 2);
  const std::vector<float> scale = Spread(kN, 3), mean = Spread(kRows, 4);
  std::vector<float> inv = Spread(kRows, 5);
  for (float& v : inv) v = std::fabs(v) + 0.5f;
  // (dX, dScale, dBias) of rows [first, first + rows).
  const auto run = [&](int64_t first, int64_t rows) {
    KernelRunner r;
    const auto slice = [&](const std::vector<float>& v, int64_t width) {
      return std::vector<float>(v.begin() + first * width, v.begin() + (first + rows) * width);
    };
    const int in_dy = r.Input({rows, kN}, slice(dy, kN));
    const int in_x = r.Input({rows, kN}, slice(x, kN));
    const int in_scale = r.Input({kN}, scale);
    const int in_mean = r.Input({rows, 1}, slice(mean, 1));
    const int in_inv = r.Input({rows, 1}, slice(inv, 1));
    const int dx = r.Output({rows, kN}), dscale = r.Output({kN}), dbias = r.Output({kN});
    r.Run("piper.LayerNormalizationGrad", {in_dy, in_x, in_scale, in_mean, in_inv},
          {dx, dscale, dbias}, {Int("axis", -1)});
    return std::vector<std::vector<float>>{r.Floats(dx), r.Floats(dscale), r.Floats(dbias)};
  };
  const auto whole = run(0, kRows), first = run(0, kRows / 2), second = run(kRows / 2, kRows / 2);
  std::vector<float> dx = first[0];
  dx.insert(dx.end(), second[0].begin(), second[0].end());
  EXPECT_TRUE(SameBits(whole[0], dx));
  EXPECT_TRUE(SameBits(whole[1], Added(first[1], second[1]))) << "dScale";
  EXPECT_TRUE(SameBits(whole[2], Added(first[2], second[2]))) << "dBias";
}

TEST(CpuSplitInvariantSum, LayerNormalizationGradMayWriteDxOverDy) {
  // The row sums read dY before dX overwrites it where the memory plan gives both one buffer.
  constexpr int64_t kRows = 16, kN = 24;
  const std::vector<float> dy = Spread(kRows * kN, 31), x = Spread(kRows * kN, 32);
  const std::vector<float> scale = Spread(kN, 33), mean = Spread(kRows, 34);
  std::vector<float> inv = Spread(kRows, 35);
  for (float& v : inv) v = std::fabs(v) + 0.5f;
  const auto run = [&](bool in_place) {
    KernelRunner r;
    const int in_dy = r.Input({kRows, kN}, dy);
    const int in_x = r.Input({kRows, kN}, x);
    const int in_scale = r.Input({kN}, scale);
    const int in_mean = r.Input({kRows, 1}, mean);
    const int in_inv = r.Input({kRows, 1}, inv);
    const int dx = in_place ? in_dy : r.Output({kRows, kN});
    const int dscale = r.Output({kN}), dbias = r.Output({kN});
    r.Run("piper.LayerNormalizationGrad", {in_dy, in_x, in_scale, in_mean, in_inv},
          {dx, dscale, dbias}, {Int("axis", -1)});
    return std::vector<std::vector<float>>{r.Floats(dx), r.Floats(dscale), r.Floats(dbias)};
  };
  const auto apart = run(false), shared = run(true);
  for (size_t i = 0; i < apart.size(); ++i) EXPECT_TRUE(SameBits(apart[i], shared[i])) << i;
}

TEST(CpuSplitInvariantSum, GatherGradSplitsAlongThePositions) {
  // An embedding's gradient: 8 x 16 token positions over a vocabulary of 10, each token at
  // many positions of both halves.
  constexpr int64_t kVocab = 10, kWidth = 24, kBatch = 8, kSequence = 16;
  std::vector<int64_t> tokens(kBatch * kSequence);
  std::mt19937 engine(11);
  for (int64_t& t : tokens) t = static_cast<int64_t>(engine() % kVocab);
  tokens[5] = -1;  // counted from the end
  const std::vector<float> dy = Spread(kBatch * kSequence * kWidth, 12);
  const auto run = [&](int64_t first, int64_t rows) {
    KernelRunner r;
    const int64_t positions = rows * kSequence;
    const int in =
        r.Input({rows, kSequence, kWidth}, {dy.begin() + first * kSequence * kWidth,
                                            dy.begin() + (first * kSequence + positions) * kWidth});
    const int indices = r.IntInput(
        {rows, kSequence},
        {tokens.begin() + first * kSequence, tokens.begin() + first * kSequence + positions});
    const int out = r.Output({kVocab, kWidth});
    r.Run("piper.GatherGrad", {in, indices}, {out}, {Int("axis", 0)});
    return r.Floats(out);
  };
  const std::vector<float> whole = run(0, kBatch);
  EXPECT_TRUE(SameBits(whole, Added(run(0, kBatch / 2), run(kBatch / 2, kBatch / 2))));
  // Still the embedding's gradient: each token's rows summed.
  for (int64_t v = 0; v < kVocab; ++v) {
    for (int64_t k = 0; k < kWidth; ++k) {
      double exact = 0.0;
      for (size_t j = 0; j < tokens.size(); ++j) {
        if ((tokens[j] + kVocab) % kVocab == v) exact += dy[j * kWidth + static_cast<size_t>(k)];
      }
      EXPECT_NEAR(whole[static_cast<size_t>(v * kWidth + k)], exact, 1e-5) << v << ", " << k;
    }
  }
}

TEST(CpuSplitInvariantSum, BiasGeluGradBiasSplitsAlongTheRows) {
  constexpr int64_t kRows = 64, kN = 48;
  const std::vector<float> dy = Spread(kRows * kN, 21), x = Spread(kRows * kN, 22);
  const std::vector<float> bias = Spread(kN, 23);
  const auto run = [&](int64_t first, int64_t rows) {
    KernelRunner r;
    const int in_dy =
        r.Input({rows, kN}, {dy.begin() + first * kN, dy.begin() + (first + rows) * kN});
    const int in_x = r.Input({rows, kN}, {x.begin() + first * kN, x.begin() + (first + rows) * kN});
    const int in_bias = r.Input({kN}, bias);
    const int dx = r.Output({rows, kN}), dbias = r.Output({kN});
    r.Run("piper.BiasGeluGrad", {in_dy, in_x, in_bias}, {dx, dbias});
    return r.Floats(dbias);
  };
  EXPECT_TRUE(SameBits(run(0, kRows), Added(run(0, kRows / 2), run(kRows / 2, kRows / 2))));
}

}  // namespace
}  // namespace piper::engine::testing
