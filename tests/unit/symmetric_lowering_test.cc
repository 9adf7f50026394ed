// Symmetric ranks lowered once and specialised (planner/lower/lower.h, SymmetricLowering): each
// plan a source specialises is the plan of the rank lowered from scratch.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>

#include "formats/strategy.h"
#include "planner/plan_model.h"

namespace piper::planner {
namespace {

const std::string kSamples = PIPER_SOURCE_DIR "/samples/";

// Plans `strategy` (JSON) on samples/`model`, asks one source for every rank in order() and
// compares each plan with RankPlans::plan(rank), which lowers the rank alone. Returns how many
// plans the source specialised.
int expect_specialised_plans_are_lowered_plans(const std::string& model,
                                               const std::string& strategy) {
  const PlanningResult result =
      plan_ranks(kSamples + model, strategy::parse_strategy(strategy, "strategy.json"));
  const RankPlans& ranks = *result.ranks;
  const auto source = ranks.source();
  EXPECT_EQ(static_cast<int>(ranks.order().size()), ranks.num_ranks());
  for (int rank : ranks.order()) {
    const plan::Plan& specialised = source(rank);
    const plan::Plan lowered = ranks.plan(rank);
    std::string difference;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&difference);
    EXPECT_TRUE(differencer.Compare(lowered, specialised)) << "rank " << rank << ": " << difference;
    // Byte for byte, as the plan files are.
    EXPECT_EQ(lowered.SerializeAsString(), specialised.SerializeAsString()) << "rank " << rank;
  }
  EXPECT_EQ(ranks.lowered() + ranks.specialised(), ranks.num_ranks());
  return ranks.specialised();
}

TEST(SymmetricLowering, DataParallelPipelineWithZeroShardsAndTransfers) {
  // dp 4 x pp 2, ZeRO-1: each stage's 4 replicas hold their own optimizer shards, batch rows,
  // transfers (p2p streams named by device) and share of the gradient norm.
  const int specialised = expect_specialised_plans_are_lowered_plans("gpt/model.onnx", R"({
    "batch": {"global": 32},
    "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
    "frozen": ["*mask*"],
    "mesh": [["dp", 4], ["pp", 2]],
    "annotations": [{"match": "/blocks.0/*", "tags": {"PP": 0}},
                    {"match": "/blocks.1/*", "tags": {"PP": 1}}],
    "directives": [{"op": "pipeline", "schedule": "1f1b", "axis": "pp",
                    "num_microbatches": 4, "zero": 1}]})");
  EXPECT_EQ(specialised, 6);
}

TEST(SymmetricLowering, ZeroThreeShardsEveryParameter) {
  const int specialised = expect_specialised_plans_are_lowered_plans("gpt/model.onnx", R"({
    "batch": {"global": 32},
    "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
    "frozen": ["*mask*"],
    "directives": [{"op": "split", "dim_name": "MB", "num_microbatches": 2},
                   {"op": "zero", "stage": 3, "devices": [0, 1, 2, 3]}]})");
  EXPECT_EQ(specialised, 3);
}

TEST(SymmetricLowering, DataTimesTensorParallelMembersSpecialiseWithinTheirPlace) {
  // dp 4 x tp 2: the ranks of one tensor-parallel place are a class; their groups differ.
  const int specialised = expect_specialised_plans_are_lowered_plans("gpt/model.onnx", R"({
    "batch": {"global": 32},
    "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
    "frozen": ["*mask*"],
    "mesh": [["dp", 4], ["tp", 2]],
    "directives": [
      {"op": "zero", "stage": 1, "axis": "dp"},
      {"op": "shard", "axis": "tp", "params": {
        "blocks.*.attn.q.*": 0, "blocks.*.attn.k.weight": 0, "blocks.*.attn.v.*": 0,
        "blocks.*.attn.proj.weight": 1, "blocks.*.mlp.fc.*": 0, "blocks.*.mlp.out.weight": 1}}]})");
  EXPECT_EQ(specialised, 6);
}

TEST(SymmetricLowering, ExpertsOfEachReplicaAreItsOwn) {
  // Experts over 4 replicas: each binds its own experts' initializers and blocks.
  const int specialised = expect_specialised_plans_are_lowered_plans("moe/model.onnx", R"({
    "batch": {"global": 16},
    "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
    "frozen": ["*mask*"],
    "mesh": [["dp", 4]],
    "directives": [
      {"op": "zero", "stage": 2, "axis": "dp"},
      {"op": "shard", "axis": "dp", "params": {
        "blocks.*.mlp.w1": 0, "blocks.*.mlp.b1": 0,
        "blocks.*.mlp.w2": 0, "blocks.*.mlp.b2": 0}}]})");
  EXPECT_EQ(specialised, 3);
}

}  // namespace
}  // namespace piper::planner
