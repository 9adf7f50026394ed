// The planned step of uniform stages against the textbook bubbles (docs/pipelines.md): p = 4
// stages of one Gemm each, m = 8 microbatches, FLOP-bound kernels and free links, so that
// every stage's F, BI and BW is one matrix product of the same size. The bubble is
// docs/cost-model.md's, 1 - busy / step of a rank; idle time is step - busy.
// GPipe and 1F1B: (p-1)/(m+p-1) = 3/11, the same step. ZB-H1: idle (p-1)(F + BI - BW), a
// third of 1F1B's (p-1)(F + B).
// The last stage also computes the loss, 14 FLOPs per logit in its F and BI against 6·width
// in its F + B: at width 1024 that stage takes 0.2% longer, and as every schedule's critical
// path crosses it m times, ZB-H1's ratio is 0.337 on the middle ranks (0.341 at width 512).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gemm_chain.h"

namespace piper {
namespace {

constexpr int kStages = 4;
constexpr int kMicrobatches = 8;
constexpr int64_t kWidth = 1024;
constexpr int64_t kRows = 64;  // per microbatch

class PipelineBubble : public ::testing::Test {
 protected:
  std::vector<plan::Plan> plan(const std::string& schedule) const {
    return testing::plan_stage_per_layer(chain_, schedule, kStages, kMicrobatches, kRows);
  }

  static double idle(const plan::Plan& rank) {
    return rank.planned_step().step_s() - rank.planned_step().busy_s();
  }

  // x + bias first, so stage 0 computes its input's gradient as the others do.
  const testing::GemmChain chain_{std::vector<int64_t>(kStages + 1, kWidth), /*input_bias=*/true};
};

TEST_F(PipelineBubble, OneFOneBReachesTheTextbookBubbleAndGPipesStep) {
  const std::vector<plan::Plan> one_f_one_b = plan("1f1b");
  const std::vector<plan::Plan> gpipe = plan("gpipe");
  const double textbook = (kStages - 1.0) / (kMicrobatches + kStages - 1.0);
  ASSERT_EQ(one_f_one_b.size(), static_cast<size_t>(kStages));
  for (size_t rank = 0; rank < one_f_one_b.size(); ++rank) {
    const plan::PlannedStep& step = one_f_one_b[rank].planned_step();
    std::printf("1f1b rank %zu: bubble %.4f, (p-1)/(m+p-1) = %.4f; step %.1f us, gpipe's %.1f us\n",
                rank, step.bubble_fraction(), textbook, 1e6 * step.step_s(),
                1e6 * gpipe[rank].planned_step().step_s());
    EXPECT_NEAR(step.bubble_fraction(), textbook, 0.02 * textbook) << "rank " << rank;
    EXPECT_NEAR(step.step_s(), gpipe[rank].planned_step().step_s(), 1e-3 * step.step_s())
        << "rank " << rank;
  }
}

TEST_F(PipelineBubble, ZbH1IdleIsAThirdOfOneFOneBs) {
  const std::vector<plan::Plan> one_f_one_b = plan("1f1b");
  const std::vector<plan::Plan> zb_h1 = plan("zb-h1");
  ASSERT_EQ(zb_h1.size(), static_cast<size_t>(kStages));
  for (size_t rank = 0; rank < zb_h1.size(); ++rank) {
    const double ratio = idle(zb_h1[rank]) / idle(one_f_one_b[rank]);
    std::printf("zb-h1 rank %zu: idle %.1f us, 1f1b's %.1f us, ratio %.4f\n", rank,
                1e6 * idle(zb_h1[rank]), 1e6 * idle(one_f_one_b[rank]), ratio);
    EXPECT_GE(ratio, 1.0 / 3 - 0.01) << "rank " << rank;
    EXPECT_LE(ratio, 0.34) << "rank " << rank;
  }
}

}  // namespace
}  // namespace piper
