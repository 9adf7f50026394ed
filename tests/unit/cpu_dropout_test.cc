// CPU Dropout and piper.DropoutGrad: identity outside training, seeded masks in training,
// and the gradient through a fixed mask.
#include <gmock/gmock.h>

#include "engine/cpu/dropout_stream.h"
#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct DropoutRun {
  std::vector<float> y;
  std::vector<uint8_t> mask;
};

// Runs Dropout(x, ratio, training) on 4096 values with the given seed and step.
DropoutRun RunDropout(float ratio, bool training, uint64_t seed, int64_t step) {
  KernelRunner k;
  const int x = k.Input({64, 64}, std::vector<float>(4096, 2.0f));
  const int r = k.Input({}, {ratio});
  const int t = k.BoolInput({}, {static_cast<uint8_t>(training)});
  const int y = k.Output({64, 64});
  const int mask = k.Output({64, 64}, plan::BOOL);
  k.Prepare("Dropout", {x, r, t}, {y, mask})->run(StepContext{step, seed});
  return {k.Floats(y), k.Bools(mask)};
}

TEST(CpuDropout, IdentityOutsideTrainingOrWithRatioZero) {
  for (const auto& [ratio, training] : {std::pair{0.5f, false}, std::pair{0.0f, true}}) {
    const DropoutRun run = RunDropout(ratio, training, 1, 1);
    EXPECT_THAT(run.y, Each(2.0f));
    EXPECT_THAT(run.mask, Each(1));
  }
  // Omitted ratio and training_mode: training_mode defaults to false.
  KernelRunner k;
  const int x = k.Input({3}, {1, 2, 3});
  const int y = k.Output({3});
  k.Run("Dropout", {x}, {y});
  EXPECT_THAT(k.Floats(y), ElementsAre(1, 2, 3));
}

TEST(CpuDropout, TrainingDropsAboutRatioAndScalesTheRest) {
  const float ratio = 0.25f;
  const DropoutRun run = RunDropout(ratio, true, 7, 3);
  int64_t kept = 0;
  for (size_t i = 0; i < run.y.size(); ++i) {
    if (run.mask[i]) {
      ++kept;
      EXPECT_FLOAT_EQ(run.y[i], 2.0f / (1 - ratio));
    } else {
      EXPECT_EQ(run.y[i], 0.0f);
    }
  }
  // 4096 Bernoulli(0.75) draws: mean 3072, standard deviation about 28.
  EXPECT_NEAR(static_cast<double>(kept), 3072, 150);
}

TEST(CpuDropout, SameSeedAndStepGiveTheSameMaskOtherwiseAnother) {
  const DropoutRun first = RunDropout(0.5f, true, 42, 5);
  const DropoutRun again = RunDropout(0.5f, true, 42, 5);
  EXPECT_EQ(first.mask, again.mask);
  EXPECT_EQ(first.y, again.y);
  EXPECT_NE(first.mask, RunDropout(0.5f, true, 42, 6).mask);
  EXPECT_NE(first.mask, RunDropout(0.5f, true, 43, 5).mask);
}

TEST(DropoutKey, GlobalIndexPlacesTheBlockInTheWholeTensor) {
  // A [2, 3] block at (2, 3) of a [4, 6] tensor: its rows are 2..3, its columns 3..5.
  dropout::Box box;
  box.rank = 2;
  box.local[0] = 2, box.local[1] = 3;
  box.offset[0] = 2, box.offset[1] = 3;
  box.whole[0] = 4, box.whole[1] = 6;
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 6; ++i) got.push_back(dropout::global_index(box, i));
  EXPECT_THAT(got, ElementsAre(15, 16, 17, 21, 22, 23));
  // Rows 1..2 of [3, 4, 5]: the inner [4, 5] is whole.
  dropout::Box rows;
  rows.rank = 1;
  rows.inner = 20;
  rows.local[0] = 2, rows.offset[0] = 1, rows.whole[0] = 3;
  EXPECT_EQ(dropout::global_index(rows, 0), 20);
  EXPECT_EQ(dropout::global_index(rows, 39), 59);
}

// Dropout of `block` rows x columns at (row, column) of an [8, 6] tensor of 2s, keyed as the
// planner keys one instance of node `node`; the mask.
std::vector<uint8_t> BlockMask(uint64_t node, int64_t rows, int64_t columns, int64_t row,
                               int64_t column) {
  KernelRunner k;
  const int x = k.Input({rows, columns}, std::vector<float>(rows * columns, 2.0f));
  const int r = k.Input({}, {0.5f});
  const int t = k.BoolInput({}, {1});
  const int y = k.Output({rows, columns});
  const int mask = k.Output({rows, columns}, plan::BOOL);
  plan::Kernel kernel = MakeKernel("Dropout", {x, r, t}, {y, mask});
  kernel.mutable_dropout()->set_node(node);
  for (int64_t extent : {8, 6}) kernel.mutable_dropout()->add_whole_shape(extent);
  for (int64_t start : {row, column}) kernel.mutable_dropout()->add_offset(start);
  k.Prepare(kernel)->run(StepContext{4, 11});
  return k.Bools(mask);
}

TEST(DropoutKey, BlocksDrawTheWholeTensorsMask) {
  const std::vector<uint8_t> whole = BlockMask(99, 8, 6, 0, 0);
  // Rows of the batch (replicas, microbatches) and blocks of columns (tensor parallelism).
  for (const auto& [rows, columns] : {std::pair{2, 6}, std::pair{4, 3}, std::pair{8, 2}}) {
    for (int64_t row = 0; row < 8; row += rows) {
      for (int64_t column = 0; column < 6; column += columns) {
        const std::vector<uint8_t> block = BlockMask(99, rows, columns, row, column);
        for (int64_t i = 0; i < rows * columns; ++i) {
          ASSERT_EQ(block[i], whole[(row + i / columns) * 6 + column + i % columns])
              << rows << "x" << columns << " block at (" << row << ", " << column << ")";
        }
      }
    }
  }
  EXPECT_NE(BlockMask(100, 8, 6, 0, 0), whole) << "another node draws another mask";
}

TEST(DropoutKey, RejectsABlockOutsideTheWholeTensor) {
  try {
    BlockMask(1, 4, 6, 6, 0);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("dropout block [6, 10) of dimension 0 lies outside"));
  }
}

TEST(CpuDropout, RatioOneDropsEverything) {
  const DropoutRun run = RunDropout(1.0f, true, 1, 1);
  EXPECT_THAT(run.y, Each(0.0f));
  EXPECT_THAT(run.mask, Each(0));
}

TEST(CpuDropout, GradientIsDyTimesMaskOverKeepProbability) {
  KernelRunner k;
  const int dy = k.Input({4}, {1, 2, 3, 4});
  const int mask = k.BoolInput({4}, {1, 0, 1, 0});
  const int ratio = k.Input({}, {0.2f});
  const int training = k.BoolInput({}, {1});
  const int not_training = k.BoolInput({}, {0});
  const int dx = k.Output({4});
  const int dx_eval = k.Output({4});
  k.Run("piper.DropoutGrad", {dy, mask, ratio, training}, {dx});
  ExpectNear(k.Floats(dx), {1 / 0.8, 0, 3 / 0.8, 0}, 1e-6, "DropoutGrad");
  k.Run("piper.DropoutGrad", {dy, mask, ratio, not_training}, {dx_eval});
  EXPECT_THAT(k.Floats(dx_eval), ElementsAre(1, 0, 3, 0));
}

TEST(CpuDropout, RejectsNonScalarRatio) {
  KernelRunner k;
  const int x = k.Input({2}, {1, 2});
  const int r = k.Input({2}, {0.1f, 0.2f});
  const int y = k.Output({2});
  try {
    k.Run("Dropout", {x, r}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Dropout: ratio must be a scalar"));
  }
}

}  // namespace
}  // namespace piper::engine::testing
