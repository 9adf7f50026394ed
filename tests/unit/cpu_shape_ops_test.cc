// CPU layout kernels: byte-copy reshapes (shape inputs ignored) and Transpose.
#include <gmock/gmock.h>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuShapeOps, ReshapeFamilyCopiesBytesAndIgnoresShapeInputs) {
  for (const char* op : {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}) {
    KernelRunner r;
    const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
    const int shape = r.IntInput({1}, {-1});
    const int y = r.Output({6, 1});
    r.Run(op, {x, shape}, {y});
    EXPECT_THAT(r.Floats(y), ElementsAre(1, 2, 3, 4, 5, 6)) << op;
  }
}

TEST(CpuShapeOps, ReshapeRejectsElementCountChange) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int y = r.Output({7});
  try {
    r.Prepare("Reshape", {x}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Reshape: input 0 [2, 3] has 6 elements but output 0 [7]"));
  }
}

TEST(CpuShapeOps, TransposeDefaultReversesDimensions) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int y = r.Output({3, 2});
  r.Run("Transpose", {x}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 4, 2, 5, 3, 6));
}

TEST(CpuShapeOps, TransposeWithPermMatchesNaiveReference) {
  const Shape xs = {2, 3, 4, 5};
  const std::vector<int64_t> perm = {2, 0, 3, 1};
  const Shape ys = {4, 2, 5, 3};
  KernelRunner r;
  const auto xv = TestValues(num_elements(xs));
  const int x = r.Input(xs, xv);
  const int y = r.Output(ys);
  r.Run("Transpose", {x}, {y}, {Ints("perm", perm)});
  std::vector<double> expected;
  for (int64_t i = 0; i < num_elements(ys); ++i) {
    const auto out = Unravel(i, ys);
    std::vector<int64_t> in(4);
    for (int d = 0; d < 4; ++d) in[perm[d]] = out[d];
    expected.push_back(xv[((in[0] * 3 + in[1]) * 4 + in[2]) * 5 + in[3]]);
  }
  ExpectNear(r.Floats(y), expected, 0, "Transpose");
}

// Matrices larger than the kernel's 32 x 32 tiles, with partial tiles at both edges and a batch
// dimension: every element lands where a naive transpose puts it.
TEST(CpuShapeOps, TransposeAcrossSeveralTilesMatchesNaiveReference) {
  const Shape xs = {3, 70, 45};
  const Shape ys = {3, 45, 70};
  KernelRunner r;
  const auto xv = TestValues(num_elements(xs));
  const int x = r.Input(xs, xv);
  const int y = r.Output(ys);
  r.Run("Transpose", {x}, {y}, {Ints("perm", {0, 2, 1})});
  std::vector<double> expected;
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t i = 0; i < 45; ++i) {
      for (int64_t j = 0; j < 70; ++j) expected.push_back(xv[(b * 70 + j) * 45 + i]);
    }
  }
  ExpectNear(r.Floats(y), expected, 0, "Transpose");
}

TEST(CpuShapeOps, TransposeInt64) {
  KernelRunner r;
  const int x = r.IntInput({2, 2}, {1, 2, 3, 4});
  const int y = r.Output({2, 2}, plan::INT64);
  r.Run("Transpose", {x}, {y}, {Ints("perm", {1, 0})});
  EXPECT_THAT(r.Int64s(y), ElementsAre(1, 3, 2, 4));
}

TEST(CpuShapeOps, TransposeRejectsBadPerm) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int y = r.Output({3, 2});
  EXPECT_THROW(r.Prepare("Transpose", {x}, {y}, {Ints("perm", {0, 0})}), Error);
  EXPECT_THROW(r.Prepare("Transpose", {x}, {y}, {Ints("perm", {0, 1})}), Error);
  EXPECT_THROW(r.Prepare("Transpose", {x}, {y}, {Int("perm", 1)}), Error);
}

}  // namespace
}  // namespace piper::engine::testing
