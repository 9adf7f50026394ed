// PlanningOptions::verify (piper-plan --no-verify) only skips checks: the plans are the same.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>

#include "formats/strategy.h"
#include "planner/plan_model.h"

namespace piper::planner {
namespace {

const std::string kSamples = PIPER_SOURCE_DIR "/samples/";

std::vector<plan::Plan> plans_of(const strategy::Strategy& strategy, bool verify) {
  PlanningOptions options;
  options.verify = verify;
  std::vector<plan::Plan> plans = plan_model(kSamples + "gpt/model.onnx", strategy, options).plans;
  // Each planning run draws a new plan id.
  for (plan::Plan& plan : plans) plan.mutable_header()->clear_plan_id();
  return plans;
}

void expect_same_plans(const strategy::Strategy& strategy, const std::string& strategy_name) {
  const std::vector<plan::Plan> verified = plans_of(strategy, true);
  const std::vector<plan::Plan> unverified = plans_of(strategy, false);
  ASSERT_EQ(verified.size(), unverified.size());
  ASSERT_GT(verified.size(), 1u);
  for (size_t rank = 0; rank < verified.size(); ++rank) {
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(verified[rank], unverified[rank]))
        << strategy_name << " rank " << rank;
  }
}

void expect_same_plans(const std::string& strategy_name) {
  expect_same_plans(strategy::load_strategy(kSamples + "strategies/" + strategy_name),
                    strategy_name);
}

TEST(PlanModelVerify, NoVerifyGivesTheSamePipelinePlans) { expect_same_plans("gpt_pipeline.json"); }

TEST(PlanModelVerify, NoVerifyGivesTheSameTensorParallelPlans) {
  expect_same_plans("gpt_tp2_dp2.json");
}

// A pipeline over a dp x pp mesh replicates its stages one after another: unverified, the
// transfers are routed once, after the last (ZeRO-2 also cuts each stage's backward).
TEST(PlanModelVerify, NoVerifyGivesTheSameReplicatedPipelinePlans) {
  for (const int zero : {1, 2}) {
    expect_same_plans(strategy::parse_strategy(R"({
      "batch": {"global": 32},
      "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
      "frozen": ["*mask*"],
      "mesh": [["dp", 2], ["pp", 2]],
      "annotations": [{"match": "/blocks.0/*", "tags": {"PP": 0}},
                      {"match": "/blocks.1/*", "tags": {"PP": 1}}],
      "directives": [{"op": "pipeline", "schedule": "1f1b", "axis": "pp",
                      "num_microbatches": 4, "zero": )" +
                                                   std::to_string(zero) + "}]}",
                                               "strategy.json"),
                      "dp x pp, ZeRO-" + std::to_string(zero));
  }
}

}  // namespace
}  // namespace piper::planner
