// CPU reductions: ReduceMean, ReduceSum (axes input, keepdims, noop_with_empty_axes), the
// reductions of reduce_math.h at their edges, piper.SumTo, piper.BroadcastTo and the
// gradients of ReduceMax and ReduceProd.
#include <gmock/gmock.h>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// x[i, j, k] = 100 i + 10 j + k for shape [2, 3, 4].
std::vector<float> Iota3() {
  std::vector<float> values;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) values.push_back(100 * i + 10 * j + k);
  return values;
}

TEST(CpuReduce, ReduceMeanKeepdims) {
  KernelRunner r;
  const int x = r.Input({2, 3, 4}, Iota3());
  const int keep = r.Output({2, 1, 4});
  const int drop = r.Output({2, 4});
  r.Run("ReduceMean", {x}, {keep}, {Ints("axes", {1})});
  r.Run("ReduceMean", {x}, {drop}, {Ints("axes", {-2}), Int("keepdims", 0)});
  EXPECT_THAT(r.Floats(keep), ElementsAre(10, 11, 12, 13, 110, 111, 112, 113));
  EXPECT_THAT(r.Floats(drop), ElementsAre(10, 11, 12, 13, 110, 111, 112, 113));
}

TEST(CpuReduce, ReduceMeanAllAxesByDefault) {
  KernelRunner r;
  const int x = r.Input({2, 3, 4}, Iota3());
  const int keep = r.Output({1, 1, 1});
  const int scalar = r.Output({});
  r.Run("ReduceMean", {x}, {keep});
  r.Run("ReduceMean", {x}, {scalar}, {Int("keepdims", 0)});
  EXPECT_THAT(r.Floats(keep), ElementsAre(61.5));
  EXPECT_THAT(r.Floats(scalar), ElementsAre(61.5));
}

TEST(CpuReduce, ReduceSumWithAxesInput) {
  KernelRunner r;
  const int x = r.Input({2, 3, 4}, Iota3());
  const int axes = r.IntInput({2}, {0, 2});
  const int keep = r.Output({1, 3, 1});
  const int drop = r.Output({3});
  r.Run("ReduceSum", {x, axes}, {keep});
  r.Run("ReduceSum", {x, axes}, {drop}, {Int("keepdims", 0)});
  // Sum over i and k of 100 i + 10 j + k: 400 + 80 j + 12.
  EXPECT_THAT(r.Floats(keep), ElementsAre(412, 492, 572));
  EXPECT_THAT(r.Floats(drop), ElementsAre(412, 492, 572));
}

TEST(CpuReduce, ReduceSumEmptyAxes) {
  KernelRunner r;
  const int x = r.Input({2, 2}, {1, 2, 3, 4});
  const int empty = r.IntInput({0}, {});
  const int all = r.Output({1, 1});
  const int same = r.Output({2, 2});
  const int omitted = r.Output({});
  r.Run("ReduceSum", {x, empty}, {all});
  r.Run("ReduceSum", {x, empty}, {same}, {Int("noop_with_empty_axes", 1)});
  r.Run("ReduceSum", {x}, {omitted}, {Int("keepdims", 0)});
  EXPECT_THAT(r.Floats(all), ElementsAre(10));
  EXPECT_THAT(r.Floats(same), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(r.Floats(omitted), ElementsAre(10));
}

TEST(CpuReduce, RejectsWrongReducedShape) {
  KernelRunner r;
  const int x = r.Input({2, 3, 4}, Iota3());
  const int y = r.Output({2, 4});
  try {
    r.Prepare("ReduceMean", {x}, {y}, {Ints("axes", {1})});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("gives [2, 1, 4] but the output has shape [2, 4]"));
  }
  EXPECT_THROW(r.Prepare("ReduceMean", {x}, {y}, {Ints("axes", {3})}), Error);
}

TEST(CpuReduce, SumToBroadcastShapes) {
  KernelRunner r;
  const int x = r.Input({2, 3, 4}, Iota3());
  const int row = r.Output({4});
  const int col = r.Output({3, 1});
  const int scalar = r.Output({});
  const int same = r.Output({2, 3, 4});
  r.Run("piper.SumTo", {x}, {row});
  r.Run("piper.SumTo", {x}, {col});
  r.Run("piper.SumTo", {x}, {scalar});
  r.Run("piper.SumTo", {x}, {same});
  // Over i, j: 300 + 60 + 6 k; over i, k: 400 + 80 j + 12.
  EXPECT_THAT(r.Floats(row), ElementsAre(360, 366, 372, 378));
  EXPECT_THAT(r.Floats(col), ElementsAre(412, 492, 572));
  EXPECT_THAT(r.Floats(scalar), ElementsAre(1476));
  EXPECT_EQ(r.Floats(same), Iota3());
}

TEST(CpuReduce, SumToRejectsNonBroadcastShape) {
  KernelRunner r;
  const int x = r.Input({2, 3, 4}, Iota3());
  const int y = r.Output({2});
  EXPECT_THROW(r.Prepare("piper.SumTo", {x}, {y}), Error);
}

TEST(CpuReduce, BroadcastToInsertsAxesAndScales) {
  KernelRunner r;
  const int x = r.Input({2, 2}, {1, 2, 3, 4});
  const int y = r.Output({2, 3, 2});
  r.Run("piper.BroadcastTo", {x}, {y}, {Ints("axes", {1}), Float("scale", 0.5)});
  EXPECT_THAT(r.Floats(y), ElementsAre(0.5, 1, 0.5, 1, 0.5, 1, 1.5, 2, 1.5, 2, 1.5, 2));
}

TEST(CpuReduce, BroadcastToWithoutAxesIsNumpyBroadcast) {
  KernelRunner r;
  const int x = r.Input({3}, {1, 2, 3});
  const int s = r.Input({}, {7});
  const int y = r.Output({2, 3});
  const int z = r.Output({2, 2});
  r.Run("piper.BroadcastTo", {x}, {y});
  r.Run("piper.BroadcastTo", {s}, {z}, {Ints("axes", {}), Float("scale", 2)});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 2, 3, 1, 2, 3));
  EXPECT_THAT(r.Floats(z), ElementsAre(14, 14, 14, 14));
}

// BroadcastTo with the reduced axes and 1/n is the adjoint of ReduceMean with keepdims=0.
TEST(CpuReduce, BroadcastToUndoesReduceMeanShape) {
  KernelRunner r;
  const int dy = r.Input({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  const int dx = r.Output({2, 3, 4});
  r.Run("piper.BroadcastTo", {dy}, {dx}, {Ints("axes", {1}), Float("scale", 1.0 / 3)});
  const auto values = r.Floats(dx);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_FLOAT_EQ(values[i * 12 + j * 4 + k], (i * 4 + k + 1) / 3.0f);
}

TEST(CpuReduce, ReduceMaxAxesAndKeepdims) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 5, 2, 7, -1, 7});
  const int rows = r.Output({2});
  const int cols = r.Output({1, 3});
  const int all = r.Output({});
  r.Run("ReduceMax", {x}, {rows}, {Ints("axes", {-1}), Int("keepdims", 0)});
  r.Run("ReduceMax", {x}, {cols}, {Ints("axes", {0})});
  r.Run("ReduceMax", {x}, {all}, {Int("keepdims", 0)});
  EXPECT_THAT(r.Floats(rows), ElementsAre(5, 7));
  EXPECT_THAT(r.Floats(cols), ElementsAre(7, 5, 7));
  EXPECT_THAT(r.Floats(all), ElementsAre(7));
  // Opset 18: axes as an input.
  const int axes = r.IntInput({1}, {1});
  const int by_input = r.Output({2, 1});
  r.Run("ReduceMax", {x, axes}, {by_input});
  EXPECT_THAT(r.Floats(by_input), ElementsAre(5, 7));
}

TEST(CpuReduce, ReduceMaxOfEmptySetIsMinusInfinity) {
  KernelRunner r;
  const int x = r.Input({2, 0}, {});
  const int y = r.Output({2, 1});
  r.Run("ReduceMax", {x}, {y}, {Ints("axes", {1})});
  EXPECT_THAT(r.Floats(y), ElementsAre(-INFINITY, -INFINITY));
}

// The gradient goes to the maxima; ties in a group share it evenly.
TEST(CpuReduce, ReduceMaxGradSplitsTies) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 5, 2, 7, -1, 7});
  const int y = r.Input({2}, {5, 7});
  const int dy = r.Input({2}, {3, 4});
  const int dx = r.Output({2, 3});
  r.Run("piper.ReduceMaxGrad", {dy, x, y}, {dx}, {Ints("axes", {1})});
  EXPECT_THAT(r.Floats(dx), ElementsAre(0, 3, 0, 2, 0, 2));
  const int y0 = r.Input({1, 3}, {7, 5, 7});
  const int dy0 = r.Input({1, 3}, {1, 2, 3});
  const int dx0 = r.Output({2, 3});
  r.Run("piper.ReduceMaxGrad", {dy0, x, y0}, {dx0}, {Ints("axes", {0})});
  EXPECT_THAT(r.Floats(dx0), ElementsAre(0, 2, 0, 1, 0, 3));
}

// Values whose exponentials overflow float and double, and groups of infinities: the shift by
// the group's maximum keeps log Σ exp finite and exact.
TEST(CpuReduce, ReduceLogSumExpShiftsByTheMaximum) {
  KernelRunner r;
  const int x = r.Input({4, 2}, {1000, 1000, -INFINITY, -INFINITY, INFINITY, 3, -1000, 0});
  const int y = r.Output({4});
  r.Run("ReduceLogSumExp", {x}, {y}, {Ints("axes", {1}), Int("keepdims", 0)});
  const std::vector<float> got = r.Floats(y);
  EXPECT_FLOAT_EQ(got[0], 1000 + std::log(2.0f));
  EXPECT_EQ(got[1], -INFINITY);
  EXPECT_EQ(got[2], INFINITY);
  EXPECT_FLOAT_EQ(got[3], 0);
}

// noop_with_empty_axes reduces each element alone: |x| for L1, x² for SumSquare.
TEST(CpuReduce, NoopReducesEachElementAlone) {
  KernelRunner r;
  const int x = r.Input({3}, {-2, 0.5f, 3});
  const int axes = r.IntInput({0}, {});
  const int l1 = r.Output({3});
  const int squares = r.Output({3});
  r.Run("ReduceL1", {x, axes}, {l1}, {Int("noop_with_empty_axes", 1)});
  r.Run("ReduceSumSquare", {x, axes}, {squares}, {Int("noop_with_empty_axes", 1)});
  EXPECT_THAT(r.Floats(l1), ElementsAre(2, 0.5f, 3));
  EXPECT_THAT(r.Floats(squares), ElementsAre(4, 0.25f, 9));
}

// Empty groups give each fold's identity, finished.
TEST(CpuReduce, EmptyGroupsGiveTheIdentity) {
  KernelRunner r;
  const int x = r.Input({2, 0}, {});
  const int min = r.Output({2});
  const int prod = r.Output({2});
  const int log_sum = r.Output({2});
  const int l2 = r.Output({2});
  for (const auto& [op, y] : {std::pair{"ReduceMin", min}, std::pair{"ReduceProd", prod},
                              std::pair{"ReduceLogSum", log_sum}, std::pair{"ReduceL2", l2}}) {
    r.Run(op, {x}, {y}, {Ints("axes", {1}), Int("keepdims", 0)});
  }
  EXPECT_THAT(r.Floats(min), ElementsAre(INFINITY, INFINITY));
  EXPECT_THAT(r.Floats(prod), ElementsAre(1, 1));
  EXPECT_THAT(r.Floats(log_sum), ElementsAre(-INFINITY, -INFINITY));
  EXPECT_THAT(r.Floats(l2), ElementsAre(0, 0));
}

// int64 reductions fold exactly in int64 (past double's 2^53, wrapping on overflow); those
// with a float result refuse int64.
TEST(CpuReduce, Int64ReductionsAreExact) {
  KernelRunner r;
  const int64_t big = (int64_t{1} << 53) + 1;
  const int x = r.IntInput({2, 3}, {big, 1, -5, 3, -4, 2});
  const int sum = r.Output({2}, plan::INT64);
  const int max = r.Output({1, 3}, plan::INT64);
  const int min = r.Output({2}, plan::INT64);
  const int prod = r.Output({2}, plan::INT64);
  const int l1 = r.Output({2}, plan::INT64);
  const int squares = r.Output({}, plan::INT64);
  r.Run("ReduceSum", {x, r.IntInput({1}, {1})}, {sum}, {Int("keepdims", 0)});
  r.Run("ReduceMax", {x}, {max}, {Ints("axes", {0})});
  r.Run("ReduceMin", {x}, {min}, {Ints("axes", {1}), Int("keepdims", 0)});
  r.Run("ReduceProd", {x}, {prod}, {Ints("axes", {1}), Int("keepdims", 0)});
  r.Run("ReduceL1", {x}, {l1}, {Ints("axes", {1}), Int("keepdims", 0)});
  r.Run("ReduceSumSquare", {x}, {squares}, {Int("keepdims", 0)});
  EXPECT_THAT(r.Int64s(sum), ElementsAre(big - 4, 1));
  EXPECT_THAT(r.Int64s(max), ElementsAre(big, 1, 2));
  EXPECT_THAT(r.Int64s(min), ElementsAre(-5, -4));
  EXPECT_THAT(r.Int64s(prod), ElementsAre(-5 * big, -24));
  EXPECT_THAT(r.Int64s(l1), ElementsAre(big + 6, 9));
  // big² wraps, as in numpy and PyTorch.
  const auto wrapped = static_cast<uint64_t>(big) * static_cast<uint64_t>(big) + 55;
  EXPECT_THAT(r.Int64s(squares), ElementsAre(static_cast<int64_t>(wrapped)));
  const int l2 = r.Output({}, plan::INT64);
  try {
    r.Run("ReduceL2", {x}, {l2}, {Int("keepdims", 0)});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("ReduceL2: input 0 (float32 only) has dtype int64"));
  }
}

// The product of the others: P / x without zeros, P at a lone zero, 0 with two zeros.
TEST(CpuReduce, ReduceProdGradHandlesZeros) {
  KernelRunner r;
  const int x = r.Input({3, 3}, {2, -3, 4, 0, 5, -2, 0, 7, 0});
  const int dy = r.Input({3, 1}, {1, 2, 3});
  const int dx = r.Output({3, 3});
  r.Run("piper.ReduceProdGrad", {dy, x}, {dx}, {Ints("axes", {1})});
  EXPECT_THAT(r.Floats(dx), ElementsAre(-12, 8, -6, -20, 0, 0, 0, 0, 0));
}

}  // namespace
}  // namespace piper::engine::testing
