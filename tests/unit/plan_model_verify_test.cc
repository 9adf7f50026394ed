// PlanningOptions::verify (piper-plan --no-verify) only skips checks: the plans are the same.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>

#include "formats/strategy.h"
#include "planner/plan_model.h"

namespace piper::planner {
namespace {

std::vector<plan::Plan> plans_of(const std::string& strategy_name, bool verify) {
  PlanningOptions options;
  options.verify = verify;
  const std::string samples = PIPER_SOURCE_DIR "/samples/";
  std::vector<plan::Plan> plans =
      plan_model(samples + "gpt/model.onnx",
                 strategy::load_strategy(samples + "strategies/" + strategy_name), options)
          .plans;
  // Each planning run draws a new plan id.
  for (plan::Plan& plan : plans) plan.mutable_header()->clear_plan_id();
  return plans;
}

void expect_same_plans(const std::string& strategy_name) {
  const std::vector<plan::Plan> verified = plans_of(strategy_name, true);
  const std::vector<plan::Plan> unverified = plans_of(strategy_name, false);
  ASSERT_EQ(verified.size(), unverified.size());
  ASSERT_GT(verified.size(), 1u);
  for (size_t rank = 0; rank < verified.size(); ++rank) {
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(verified[rank], unverified[rank]))
        << strategy_name << " rank " << rank;
  }
}

TEST(PlanModelVerify, NoVerifyGivesTheSamePipelinePlans) { expect_same_plans("gpt_pipeline.json"); }

TEST(PlanModelVerify, NoVerifyGivesTheSameTensorParallelPlans) {
  expect_same_plans("gpt_tp2_dp2.json");
}

}  // namespace
}  // namespace piper::planner
