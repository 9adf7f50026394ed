// CPU matrix products: ONNX Gemm (transposes, alpha, beta, broadcast C), ONNX MatMul
// (1-D operands, batch broadcasting) and piper.MatMul (transposed last two dimensions).
#include <gmock/gmock.h>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Naive numpy matmul of A and B, each of rank >= 2 (after the 1-D promotion the caller
// does), transposing the last two dimensions first when asked; batch dimensions broadcast.
std::vector<double> NaiveMatMul(const std::vector<float>& a, Shape as, const std::vector<float>& b,
                                Shape bs, bool ta, bool tb, const Shape& batch) {
  const int64_t ar = static_cast<int64_t>(as.size()), br = static_cast<int64_t>(bs.size());
  const int64_t m = ta ? as[ar - 1] : as[ar - 2], k = ta ? as[ar - 2] : as[ar - 1];
  const int64_t n = tb ? bs[br - 2] : bs[br - 1];
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  std::vector<double> y;
  for (int64_t bi = 0; bi < num_elements(batch); ++bi) {
    const auto index = Unravel(bi, batch);
    const int64_t ao = BroadcastOffset(index, a_batch) * as[ar - 2] * as[ar - 1];
    const int64_t bo = BroadcastOffset(index, b_batch) * bs[br - 2] * bs[br - 1];
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = ta ? a[ao + p * m + i] : a[ao + i * k + p];
          const double bv = tb ? b[bo + j * k + p] : b[bo + p * n + j];
          sum += av * bv;
        }
        y.push_back(sum);
      }
    }
  }
  return y;
}

TEST(CpuGemm, TransposesAlphaBetaAndBroadcastC) {
  const int64_t m = 3, k = 4, n = 5;
  const std::vector<Shape> c_shapes = {{n}, {m, 1}, {m, n}, {}, {1, n}};
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (const Shape& c_shape : c_shapes) {
        KernelRunner r;
        const Shape a_shape = ta ? Shape{k, m} : Shape{m, k};
        const Shape b_shape = tb ? Shape{n, k} : Shape{k, n};
        const auto av = TestValues(m * k, 3), bv = TestValues(k * n, 4);
        const auto cv = TestValues(num_elements(c_shape), 5);
        const int a = r.Input(a_shape, av);
        const int b = r.Input(b_shape, bv);
        const int c = r.Input(c_shape, cv);
        const int y = r.Output({m, n});
        r.Run("Gemm", {a, b, c}, {y},
              {Int("transA", ta), Int("transB", tb), Float("alpha", 0.5), Float("beta", -2.0)});
        std::vector<double> expected = NaiveMatMul(av, a_shape, bv, b_shape, ta, tb, {});
        for (int64_t i = 0; i < m * n; ++i) {
          expected[i] = 0.5 * expected[i] - 2.0 * cv[BroadcastOffset(Unravel(i, {m, n}), c_shape)];
        }
        ExpectNear(r.Floats(y), expected, 1e-5,
                   "Gemm transA=" + std::to_string(ta) + " transB=" + std::to_string(tb) + " C " +
                       shape_string(c_shape));
      }
    }
  }
}

TEST(CpuGemm, WithoutC) {
  KernelRunner r;
  const int a = r.Input({2, 2}, {1, 2, 3, 4});
  const int b = r.Input({2, 2}, {5, 6, 7, 8});
  const int y = r.Output({2, 2});
  r.Run("Gemm", {a, b, KernelRunner::kOmitted}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(19, 22, 43, 50));
  const int y2 = r.Output({2, 2});
  r.Run("Gemm", {a, b}, {y2}, {Int("transB", 1)});
  EXPECT_THAT(r.Floats(y2), ElementsAre(17, 23, 39, 53));
}

TEST(CpuMatMul, OneDimensionalOperands) {
  KernelRunner r;
  const int v = r.Input({2}, {1, 2});
  const int m = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int w = r.Input({3}, {1, 0, -1});
  const int vm = r.Output({3});
  const int mw = r.Output({2});
  const int vv = r.Output({});
  r.Run("MatMul", {v, m}, {vm});
  r.Run("MatMul", {m, w}, {mw});
  r.Run("MatMul", {v, v}, {vv});
  EXPECT_THAT(r.Floats(vm), ElementsAre(9, 12, 15));
  EXPECT_THAT(r.Floats(mw), ElementsAre(-2, -2));
  EXPECT_THAT(r.Floats(vv), ElementsAre(5));
}

TEST(CpuMatMul, BatchedWithSharedRightOperand) {
  KernelRunner r;
  const Shape as = {2, 3, 4, 5}, bs = {5, 6};
  const auto av = TestValues(num_elements(as), 6), bv = TestValues(num_elements(bs), 7);
  const int a = r.Input(as, av);
  const int b = r.Input(bs, bv);
  const int y = r.Output({2, 3, 4, 6});
  r.Run("MatMul", {a, b}, {y});
  ExpectNear(r.Floats(y), NaiveMatMul(av, as, bv, bs, false, false, {2, 3}), 1e-5, "MatMul");
}

TEST(CpuMatMul, BatchDimensionsBroadcastBothWays) {
  KernelRunner r;
  const Shape as = {2, 1, 4, 5}, bs = {3, 5, 6};
  const auto av = TestValues(num_elements(as), 8), bv = TestValues(num_elements(bs), 9);
  const int a = r.Input(as, av);
  const int b = r.Input(bs, bv);
  const int y = r.Output({2, 3, 4, 6});
  r.Run("MatMul", {a, b}, {y});
  ExpectNear(r.Floats(y), NaiveMatMul(av, as, bv, bs, false, false, {2, 3}), 1e-5, "MatMul");
}

TEST(CpuMatMul, LeftMatrixTimesBatchedRight) {
  KernelRunner r;
  const Shape as = {4, 5}, bs = {3, 5, 2};
  const auto av = TestValues(num_elements(as), 10), bv = TestValues(num_elements(bs), 11);
  const int a = r.Input(as, av);
  const int b = r.Input(bs, bv);
  const int y = r.Output({3, 4, 2});
  r.Run("MatMul", {a, b}, {y});
  ExpectNear(r.Floats(y), NaiveMatMul(av, as, bv, bs, false, false, {3}), 1e-5, "MatMul");
}

TEST(CpuMatMul, PiperMatMulTransposesLastTwoDimensions) {
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      KernelRunner r;
      const Shape as = ta ? Shape{2, 5, 4} : Shape{2, 4, 5};
      const Shape bs = tb ? Shape{1, 6, 5} : Shape{1, 5, 6};
      const auto av = TestValues(num_elements(as), 12), bv = TestValues(num_elements(bs), 13);
      const int a = r.Input(as, av);
      const int b = r.Input(bs, bv);
      const int y = r.Output({2, 4, 6});
      r.Run("piper.MatMul", {a, b}, {y}, {Int("transA", ta), Int("transB", tb)});
      ExpectNear(r.Floats(y), NaiveMatMul(av, as, bv, bs, ta, tb, {2}), 1e-5,
                 "piper.MatMul transA=" + std::to_string(ta) + " transB=" + std::to_string(tb));
    }
  }
}

TEST(CpuMatMul, RejectsMismatchedInnerDimensions) {
  KernelRunner r;
  const int a = r.Input({2, 3}, TestValues(6));
  const int b = r.Input({4, 2}, TestValues(8));
  const int y = r.Output({2, 2});
  try {
    r.Prepare("MatMul", {a, b}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("MatMul: inner dimensions differ"));
  }
}

TEST(CpuMatMul, RejectsWrongOutputShape) {
  KernelRunner r;
  const int a = r.Input({2, 3}, TestValues(6));
  const int b = r.Input({3, 4}, TestValues(12));
  const int y = r.Output({2, 5});
  try {
    r.Prepare("MatMul", {a, b}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("gives [2, 4] but the output has shape [2, 5]"));
  }
}

}  // namespace
}  // namespace piper::engine::testing
