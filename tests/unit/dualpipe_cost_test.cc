// DualPipe's table (deepseek-ai/DualPipe README) against the planned step of uniform stages:
// bubble (P/2-1)(F&B + B - 3W), parameters 2x 1F1B's per device, activations P+1
// microbatches; DualPipeV the same with its P stages on P/2 devices. The model is P Gemm
// layers of one width (stage l = layer l) with FLOP-bound rates, so every stage's F, BI and
// BW are one matrix product of the same size: F = BI = BW, the table's assumption (there, B
// = F; here the full backward B = BI + BW = 2F).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "gemm_chain.h"

namespace piper {
namespace {

constexpr int64_t kWidth = 512;
constexpr int64_t kRows = 64;  // per microbatch

// Stage l is layer l of a chain of `stages` Gemms of one width (x + bias first, so stage 0 too
// computes its input's gradient), FLOP-bound with free links.
std::vector<plan::Plan> plan(int stages, const std::string& schedule, int devices,
                             int microbatches) {
  const testing::GemmChain chain(std::vector<int64_t>(stages + 1, kWidth), /*input_bias=*/true);
  return testing::plan_stage_per_layer(chain, schedule, devices, microbatches, kRows);
}

// The table's terms as the plan prices them, on one rank: F a forward, B a full backward, W a
// weight pass (each run alone), F&B an overlapped pair (a forward and a backward on two
// streams over the same span).
struct Terms {
  double f = 0, b = 0, w = 0, fb = 0;
};

Terms terms_of(const plan::Plan& rank) {
  std::map<std::pair<double, double>, std::vector<const plan::PlannedTask*>> by_span;
  for (const plan::PlannedTask& task : rank.planned_tasks()) {
    if (task.kind() == "compute" && task.pass() != plan::UPDATE) {
      by_span[{task.start_s(), task.end_s()}].push_back(&task);
    }
  }
  Terms terms;
  for (const auto& [span, tasks] : by_span) {
    const double seconds = span.second - span.first;
    if (tasks.size() == 2) {
      EXPECT_NE(tasks[0]->stream(), tasks[1]->stream());
      terms.fb = std::max(terms.fb, seconds);
    } else if (tasks[0]->pass() == plan::FORWARD) {
      terms.f = std::max(terms.f, seconds);
    } else if (tasks[0]->pass() == plan::BACKWARD) {
      terms.b = std::max(terms.b, seconds);
    } else if (tasks[0]->pass() == plan::BACKWARD_WEIGHT) {
      terms.w = std::max(terms.w, seconds);
    }
  }
  return terms;
}

// Most stage activations the rank's planned step holds at once: a (stage, microbatch,
// direction)'s from the start of its forward until the end of its backward or, split, its
// weight pass (which reads the stage's input as the input pass does).
int peak_live_microbatches(const plan::Plan& rank) {
  std::vector<std::pair<double, int>> events;  // (time, +1 at a forward's start, -1 freed)
  for (const plan::PlannedTask& task : rank.planned_tasks()) {
    if (!task.has_stage() || task.kind() != "compute") continue;
    if (task.pass() == plan::FORWARD) events.emplace_back(task.start_s(), +1);
    if (task.pass() == plan::BACKWARD || task.pass() == plan::BACKWARD_WEIGHT) {
      events.emplace_back(task.end_s(), -1);
    }
  }
  std::sort(events.begin(), events.end());  // at one time, frees before allocations
  int live = 0, peak = 0;
  for (const auto& [time, change] : events) peak = std::max(peak, live += change);
  return peak;
}

// Each P with the dualpipe and dualpipev layouts of P stages, 2P microbatches.
class DualPipeCost : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(DualPipeCost, PlannedStepMatchesDualPipesTable) {
  const auto& [stages, schedule] = GetParam();
  const int devices = schedule == "dualpipe" ? stages : stages / 2;
  const std::vector<plan::Plan> plans = plan(stages, schedule, devices, 2 * stages);
  const std::vector<plan::Plan> one_f_one_b = plan(stages, "1f1b", stages, 2 * stages);
  // Rank 1 holds two middle stages (1 and P-2; DualPipeV: 1 and P-2 as well), no loss.
  const Terms t = terms_of(plans.at(1));
  ASSERT_GT(t.f, 0);
  ASSERT_GT(t.w, 0);
  ASSERT_GT(t.fb, 0);
  if (t.b == 0) GTEST_FAIL() << "no full backward runs alone on rank 1";
  EXPECT_NEAR(t.fb, t.f + t.b, 1e-3 * t.fb);  // no reshards to hide: F&B = F + B
  const double formula = (stages / 2.0 - 1) * (t.fb + t.b - 3 * t.w);
  for (size_t rank = 0; rank < plans.size(); ++rank) {
    const plan::PlannedStep& step = plans[rank].planned_step();
    const double bubble = step.step_s() - step.busy_s();
    std::printf("%s P=%d rank %zu: planned bubble %.1f us, (P/2-1)(F&B+B-3W) = %.1f us\n",
                schedule.c_str(), stages, rank, 1e6 * bubble, 1e6 * formula);
    EXPECT_NEAR(bubble, formula, 0.05 * formula) << "rank " << rank;
  }
  // A 1F1B rank holds one stage's parameters, a DualPipe rank two (r and P-1-r).
  const auto parameters = [](const plan::Plan& p) {
    return static_cast<double>(p.memory().parameter_bytes());
  };
  const double per_stage = parameters(one_f_one_b.at(1));
  for (size_t rank = 0; rank < plans.size(); ++rank) {
    EXPECT_NEAR(parameters(plans[rank]), 2 * per_stage, 0.01 * per_stage) << "rank " << rank;
    const int live = peak_live_microbatches(plans[rank]);
    std::printf("%s P=%d rank %zu: parameters %.2fx 1F1B's, peak activations %d microbatches\n",
                schedule.c_str(), stages, rank, parameters(plans[rank]) / per_stage, live);
    EXPECT_EQ(live, stages + 1) << "rank " << rank;
  }
}

// ZeRO-2 over the mirror pairs accumulates each gradient bucket after its reduce-scatter in a
// task of the backward's pass and microbatch, which its order group binds too: the groups' forward
// and backward still run as overlapped pairs, and the step as without ZeRO but for the update's
// gathers.
TEST(DualPipeCost, ZeroTwoKeepsTheOverlappedPairs) {
  const testing::GemmChain chain(std::vector<int64_t>(5, kWidth), /*input_bias=*/true);
  const std::vector<plan::Plan> plain =
      testing::plan_stage_per_layer(chain, "dualpipe", 4, 8, kRows);
  const std::vector<plan::Plan> zero = testing::plan_stage_per_layer(
      chain, "dualpipe", 4, 8, kRows, testing::flop_bound(), R"(, "zero": 2)");
  for (size_t rank = 0; rank < zero.size(); ++rank) {
    const Terms with = terms_of(zero[rank]);
    const Terms without = terms_of(plain[rank]);
    ASSERT_GT(with.fb, 0) << "rank " << rank << " runs no overlapped pair";
    // Less the accumulation the tasks after the reduce-scatters do.
    EXPECT_NEAR(with.fb, without.fb, 0.01 * without.fb) << "rank " << rank;
    const double step = zero[rank].planned_step().step_s();
    EXPECT_NEAR(step, plain[rank].planned_step().step_s(), 0.05 * step) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, DualPipeCost,
                         ::testing::Combine(::testing::Values(4, 8),
                                            ::testing::Values("dualpipe", "dualpipev")),
                         [](const auto& info) {
                           return std::get<1>(info.param) + "_p" +
                                  std::to_string(std::get<0>(info.param));
                         });

}  // namespace
}  // namespace piper
