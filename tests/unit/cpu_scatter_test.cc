// CPU kernels that write or read through index tuples and tiles: Tile, ScatterND,
// ScatterElements, GatherND and piper.GatherNDGrad, against hand-computed values (ONNX's own
// examples run in tests/conformance).
#include <gmock/gmock.h>

#include "engine/cpu/parallel.h"
#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ErrorOf(KernelRunner& r, const std::string& op, const std::vector<int>& inputs,
                    const std::vector<int>& outputs, const std::vector<plan::Attribute>& attrs) {
  try {
    r.Run(op, inputs, outputs, attrs);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(CpuScatter, TileRepeatsEveryDimension) {
  KernelRunner r;
  const int x = r.Input({2, 2}, {1, 2, 3, 4});
  const int repeats = r.IntInput({2}, {2, 3});
  const int y = r.Output({4, 6});
  r.Run("Tile", {x, repeats}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,  //
                                       1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4));
}

TEST(CpuScatter, TileInt64AndRejectsAPartialTile) {
  KernelRunner r;
  const int x = r.IntInput({1, 3}, {7, 8, 9});
  const int repeats = r.IntInput({2}, {2, 1});
  const int y = r.Output({2, 3}, plan::INT64);
  r.Run("Tile", {x, repeats}, {y});
  EXPECT_THAT(r.Int64s(y), ElementsAre(7, 8, 9, 7, 8, 9));
  const int bad = r.Output({2, 4}, plan::INT64);
  EXPECT_THAT(ErrorOf(r, "Tile", {x, repeats}, {bad}, {}),
              HasSubstr("no whole number of tiles of the input [1, 3] in dimension 1"));
}

TEST(CpuScatter, ScatterNDRepeatedIndexKeepsTheLastUpdate) {
  KernelRunner r;
  const int data = r.Input({4}, {1, 2, 3, 4});
  const int idx = r.IntInput({3, 1}, {1, 1, -1});
  const int updates = r.Input({3}, {10, 20, 30});
  const int y = r.Output({4});
  r.Run("ScatterND", {data, idx, updates}, {y});
  EXPECT_THAT(r.Floats(y), ElementsAre(1, 20, 3, 30));
}

TEST(CpuScatter, ScatterNDAddsSlicesOfInt64) {
  KernelRunner r;
  const int data = r.IntInput({2, 3}, {1, 1, 1, 1, 1, 1});
  const int idx = r.IntInput({2, 1}, {1, 1});
  const int updates = r.IntInput({2, 3}, {1, 2, 3, 10, 20, 30});
  const int y = r.Output({2, 3}, plan::INT64);
  r.Run("ScatterND", {data, idx, updates}, {y}, {Str("reduction", "add")});
  EXPECT_THAT(r.Int64s(y), ElementsAre(1, 1, 1, 12, 23, 34));
  const int product = r.Output({2, 3}, plan::INT64);
  r.Run("ScatterND", {data, idx, updates}, {product}, {Str("reduction", "mul")});
  EXPECT_THAT(r.Int64s(product), ElementsAre(1, 1, 1, 10, 40, 90));
}

TEST(CpuScatter, ScatterNDWritesBoolElements) {
  KernelRunner r;
  const int data = r.BoolInput({2, 2}, {0, 0, 0, 0});
  const int idx = r.IntInput({1, 2}, {1, 0});
  const int updates = r.BoolInput({1}, {1});
  const int y = r.Output({2, 2}, plan::BOOL);
  r.Run("ScatterND", {data, idx, updates}, {y});
  EXPECT_THAT(r.Bools(y), ElementsAre(0, 0, 1, 0));
}

TEST(CpuScatter, ScatterNDRejectsIndicesOutOfRangeAndUnknownReductions) {
  KernelRunner r;
  const int data = r.Input({4}, {1, 2, 3, 4});
  const int idx = r.IntInput({2, 1}, {0, 4});
  const int updates = r.Input({2}, {10, 20});
  const int y = r.Output({4});
  EXPECT_THAT(ErrorOf(r, "ScatterND", {data, idx, updates}, {y}, {}),
              HasSubstr("ScatterND: index 4 at position 1 is out of range for an axis of size 4"));
  EXPECT_THAT(ErrorOf(r, "ScatterND", {data, idx, updates}, {y}, {Str("reduction", "max")}),
              HasSubstr("ScatterND: reduction 'max' is not one Piper implements"));
  const int flags = r.BoolInput({4}, {0, 0, 0, 0});
  const int set = r.BoolInput({2}, {1, 1});
  const int z = r.Output({4}, plan::BOOL);
  EXPECT_THAT(ErrorOf(r, "ScatterND", {flags, idx, set}, {z}, {Str("reduction", "add")}),
              HasSubstr("reduction 'add' takes float32 or int64 data, not bool"));
}

TEST(CpuScatter, ScatterElementsAlongEachAxis) {
  KernelRunner r;
  const int data = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({2, 2}, {2, 0, -1, 1});
  const int updates = r.Input({2, 2}, {10, 20, 30, 40});
  const int y = r.Output({2, 3});
  r.Run("ScatterElements", {data, idx, updates}, {y}, {Int("axis", 1)});
  EXPECT_THAT(r.Floats(y), ElementsAre(20, 2, 10, 4, 40, 30));
  const int rows = r.IntInput({1, 3}, {1, 0, 1});
  const int row_updates = r.Input({1, 3}, {7, 8, 9});
  const int z = r.Output({2, 3});
  r.Run("ScatterElements", {data, rows, row_updates}, {z}, {Int("axis", 0)});
  EXPECT_THAT(r.Floats(z), ElementsAre(1, 8, 3, 7, 5, 9));
}

TEST(CpuScatter, ScatterElementsAddAccumulatesRepeatedIndices) {
  KernelRunner r;
  const int data = r.Input({1, 3}, {1, 1, 1});
  const int idx = r.IntInput({1, 4}, {0, 2, 0, 0});
  const int updates = r.Input({1, 4}, {1, 2, 3, 4});
  const int y = r.Output({1, 3});
  r.Run("ScatterElements", {data, idx, updates}, {y}, {Int("axis", 1), Str("reduction", "add")});
  EXPECT_THAT(r.Floats(y), ElementsAre(9, 1, 3));
}

// Large enough for several threads: lines spread over them, each line's updates in order, so
// the result is the sequential one (repeated indices: the last update, or the sum).
TEST(CpuScatter, ScatterElementsOnSeveralThreadsKeepsTheOrderOfEachLine) {
  const int saved = cpu::num_threads();
  cpu::set_num_threads(3);
  const int64_t columns = 3 * cpu::kParallelGrain;
  std::vector<float> data(static_cast<size_t>(2 * columns)), updates(data.size() * 2);
  std::vector<int64_t> indices(updates.size());
  for (size_t e = 0; e < updates.size(); ++e) {
    updates[e] = static_cast<float>(e % 97);
    indices[e] = static_cast<int64_t>((e * 7919) % 3 == 0 ? 1 : 0);  // rows repeat
  }
  for (const char* reduction : {"none", "add"}) {
    KernelRunner r;
    const int x = r.Input({2, columns}, data);
    const int idx = r.IntInput({4, columns}, indices);
    const int u = r.Input({4, columns}, updates);
    const int y = r.Output({2, columns});
    r.Run("ScatterElements", {x, idx, u}, {y}, {Int("axis", 0), Str("reduction", reduction)});
    std::vector<float> expected = data;
    for (size_t e = 0; e < updates.size(); ++e) {
      float& element = expected[static_cast<size_t>(indices[e]) * columns + e % columns];
      element = std::string(reduction) == "add" ? element + updates[e] : updates[e];
    }
    EXPECT_EQ(r.Floats(y), expected) << reduction;
  }
  cpu::set_num_threads(saved);
}

TEST(CpuScatter, GatherNDWithBatchDims) {
  KernelRunner r;
  const int data = r.Input({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  const int idx = r.IntInput({2, 1}, {1, 0});
  const int y = r.Output({2, 2});
  r.Run("GatherND", {data, idx}, {y}, {Int("batch_dims", 1)});
  EXPECT_THAT(r.Floats(y), ElementsAre(2, 3, 4, 5));
  const int pairs = r.IntInput({2, 2}, {0, 1, -1, 0});
  const int z = r.Output({2, 2});
  r.Run("GatherND", {data, pairs}, {z});
  EXPECT_THAT(r.Floats(z), ElementsAre(2, 3, 4, 5));
}

TEST(CpuScatter, GatherNDGradAddsRepeatedTuples) {
  KernelRunner r;
  const int dy = r.Input({3, 2}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({3, 1}, {2, 0, 2});
  const int dx = r.Output({3, 2});
  r.Set(dx, std::vector<float>(6, 9));  // overwritten, not accumulated into
  r.Run("piper.GatherNDGrad", {dy, idx}, {dx});
  EXPECT_THAT(r.Floats(dx), ElementsAre(3, 4, 0, 0, 6, 8));
}

TEST(CpuScatter, GatherNDRejectsMismatchedShapesAndIndices) {
  KernelRunner r;
  const int data = r.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int idx = r.IntInput({2, 2}, {0, 1, 1, 3});
  const int y = r.Output({2});
  EXPECT_THAT(ErrorOf(r, "GatherND", {data, idx}, {y}, {}),
              HasSubstr("GatherND: index 3 at position 3 is out of range for an axis of size 3"));
  const int wrong = r.Output({2, 3});
  EXPECT_THAT(ErrorOf(r, "GatherND", {data, idx}, {wrong}, {}),
              HasSubstr("address [2] but the output has shape [2, 3]"));
}

}  // namespace
}  // namespace piper::engine::testing
