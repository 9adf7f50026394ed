// CPU indexing kernels: Gather, GatherElements and their scatter-add adjoints,
// OneHot, ArgMax/ArgMin and TopK, against hand-computed values.
#include <gmock/gmock.h>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuIndexing, GatherRowsWithNegativeAndTwoDimensionalIndices) {
  KernelRunner r;
  const int x = r.Input({3, 2}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({2, 2}, {0, -1, 1, 0});
  const int y = r.Output({2, 2, 2});
  r.Run("Gather", {x, idx}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 2, 5, 6, 3, 4, 1, 2));
}

TEST(CpuIndexing, GatherInnerAxisAndInt64Data) {
  KernelRunner r;
  const int x = r.IntInput({2, 3}, {10, 11, 12, 20, 21, 22});
  const int idx = r.IntInput({2}, {2, 0});
  const int y = r.Output({2, 2}, plan::INT64);
  r.Run("Gather", {x, idx}, {y}, {Int("axis", -1)});
  EXPECT_THAT(r.Int64s(y), ElementsAre(12, 10, 22, 20));
}

TEST(CpuIndexing, GatherScalarIndexDropsTheAxis) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({}, {1});
  const int y = r.Output({2});
  r.Run("Gather", {x, idx}, {y}, {Int("axis", 1)});
  EXPECT_THAT(r.Floats(y), ElementsAre(2, 5));
}

TEST(CpuIndexing, GatherRejectsIndexOutOfRangeAtRunTime) {
  KernelRunner r;
  const int x = r.Input({3, 2}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({2}, {0, 3});
  const int y = r.Output({2, 2});
  try {
    r.Run("Gather", {x, idx}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Gather: index 3 at position 1 is out of range"));
  }
}

TEST(CpuIndexing, GatherRejectsWrongOutputShape) {
  KernelRunner r;
  const int x = r.Input({3, 2}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({2}, {0, 1});
  const int y = r.Output({2, 3});
  EXPECT_THROW(r.Prepare("Gather", {x, idx}, {y}), Error);
}

TEST(CpuIndexing, GatherGradAccumulatesRepeatedIndices) {
  KernelRunner r;
  const int dy = r.Input({3, 2}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({3}, {2, 0, -1});
  const int dx = r.Output({4, 2});
  r.Set(dx, std::vector<float>(8, 9));  // overwritten, not accumulated into
  r.Run("piper.GatherGrad", {dy, idx}, {dx});
  EXPECT_THAT(r.Floats(dx), ElementsAre(3, 4, 0, 0, 1, 2, 5, 6));
}

TEST(CpuIndexing, GatherGradInnerAxis) {
  KernelRunner r;
  const int dy = r.Input({2, 2}, {1, 2, 3, 4});
  const int idx = r.IntInput({2}, {1, 1});
  const int dx = r.Output({2, 3});
  r.Run("piper.GatherGrad", {dy, idx}, {dx}, {Int("axis", 1)});
  EXPECT_THAT(r.Floats(dx), ElementsAre(0, 3, 0, 0, 7, 0));
}

TEST(CpuIndexing, GatherElementsAndItsGradient) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({2, 2}, {2, 0, -2, 1});
  const int y = r.Output({2, 2});
  r.Run("GatherElements", {x, idx}, {y}, {Int("axis", 1)});
  EXPECT_THAT(r.Floats(y), ElementsAre(3, 1, 5, 5));
  const int dy = r.Input({2, 2}, {1, 2, 3, 4});
  const int dx = r.Output({2, 3});
  r.Run("piper.GatherElementsGrad", {dy, idx}, {dx}, {Int("axis", 1)});
  EXPECT_THAT(r.Floats(dx), ElementsAre(2, 0, 1, 0, 7, 0));
}

TEST(CpuIndexing, GatherElementsAxisZero) {
  KernelRunner r;
  const int x = r.Input({3, 2}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({2, 2}, {1, 2, 0, 1});
  const int y = r.Output({2, 2});
  r.Run("GatherElements", {x, idx}, {y}, {Int("axis", 0)});
  EXPECT_THAT(r.Floats(y), ElementsAre(3, 6, 1, 4));
}

TEST(CpuIndexing, OneHotLastAxisWithNegativeAndOutOfRangeIndices) {
  KernelRunner r;
  const int idx = r.IntInput({3}, {0, -1, 5});
  const int depth = r.IntInput({}, {3});
  const int values = r.Input({2}, {-1, 7});
  const int y = r.Output({3, 3});
  r.Run("OneHot", {idx, depth, values}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(7, -1, -1, -1, -1, 7, -1, -1, -1));
}

TEST(CpuIndexing, OneHotAxisZeroInt64) {
  KernelRunner r;
  const int idx = r.IntInput({2}, {1, 0});
  const int depth = r.IntInput({}, {2});
  const int values = r.IntInput({2}, {0, 1});
  const int y = r.Output({2, 2}, plan::INT64);
  r.Run("OneHot", {idx, depth, values}, {y}, {Int("axis", 0)});
  EXPECT_THAT(r.Int64s(y), ElementsAre(0, 1, 1, 0));
}

TEST(CpuIndexing, ArgMaxKeepdimsAndSelectLastIndex) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 5, 5, 7, 2, 7});
  const int first = r.Output({2, 1}, plan::INT64);
  r.Run("ArgMax", {x}, {first}, {Int("axis", 1)});
  EXPECT_THAT(r.Int64s(first), ElementsAre(1, 0));
  const int last = r.Output({2}, plan::INT64);
  r.Run("ArgMax", {x}, {last}, {Int("axis", -1), Int("keepdims", 0), Int("select_last_index", 1)});
  EXPECT_THAT(r.Int64s(last), ElementsAre(2, 2));
  const int columns = r.Output({1, 3}, plan::INT64);
  r.Run("ArgMax", {x}, {columns});
  EXPECT_THAT(r.Int64s(columns), ElementsAre(1, 0, 1));
  const int minima = r.Output({2}, plan::INT64);
  r.Run("ArgMin", {x}, {minima}, {Int("axis", 1), Int("keepdims", 0)});
  EXPECT_THAT(r.Int64s(minima), ElementsAre(0, 1));
}

TEST(CpuIndexing, ArgMaxRejectsWrongOutputShape) {
  KernelRunner r;
  const int x = r.Input({2, 3}, {1, 5, 5, 7, 2, 7});
  const int y = r.Output({2}, plan::INT64);
  EXPECT_THROW(r.Prepare("ArgMax", {x}, {y}, {Int("axis", 1)}), Error);
}

TEST(CpuIndexing, TopKLargestSortedWithTiesInOriginalOrder) {
  KernelRunner r;
  const int x = r.Input({2, 4}, {1, 3, 3, 2, 0, -1, 4, 4});
  const int k = r.IntInput({1}, {3});
  const int values = r.Output({2, 3});
  const int indices = r.Output({2, 3}, plan::INT64);
  r.Run("TopK", {x, k}, {values, indices});
  EXPECT_THAT(r.Floats(values), ElementsAre(3, 3, 2, 4, 4, 0));
  EXPECT_THAT(r.Int64s(indices), ElementsAre(1, 2, 3, 2, 3, 0));
}

TEST(CpuIndexing, TopKSmallestAlongAxisZero) {
  KernelRunner r;
  const int x = r.Input({3, 2}, {5, 1, 2, 6, 4, 0});
  const int k = r.IntInput({1}, {2});
  const int values = r.Output({2, 2});
  const int indices = r.Output({2, 2}, plan::INT64);
  r.Run("TopK", {x, k}, {values, indices}, {Int("axis", 0), Int("largest", 0)});
  EXPECT_THAT(r.Floats(values), ElementsAre(2, 0, 4, 1));
  EXPECT_THAT(r.Int64s(indices), ElementsAre(1, 2, 2, 0));
}

TEST(CpuIndexing, TopKFailsWhenKDisagreesWithThePlan) {
  KernelRunner r;
  const int x = r.Input({4}, {1, 2, 3, 4});
  const int k = r.IntInput({1}, {3});
  const int values = r.Output({2});
  const int indices = r.Output({2}, plan::INT64);
  EXPECT_THROW(r.Run("TopK", {x, k}, {values, indices}), Error);
}

}  // namespace
}  // namespace piper::engine::testing
