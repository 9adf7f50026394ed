#include "planner/auto_stages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "formats/error.h"
#include "gemm_chain.h"

namespace piper {
namespace {

// `chain` with "stages": "auto" over `devices` resolved, the initializers `frozen` names
// frozen (32 rows per microbatch, 2 microbatches).
strategy::Strategy resolve(const testing::GemmChain& chain, const std::string& devices,
                           const std::vector<std::string>& frozen = {}) {
  const auto written = strategy::parse_strategy(
      R"({"batch": {"global": 64}, "directives": [{"op": "pipeline", "schedule": "1f1b",
          "devices": )" +
          devices + R"(, "num_microbatches": 2, "stages": "auto"}]})",
      "s.json");
  planner::ImportOptions options;
  options.batch = 32;
  options.is_frozen = [frozen](const std::string& name) {
    return std::find(frozen.begin(), frozen.end(), name) != frozen.end();
  };
  return planner::resolve_auto_stages(chain.path(), written, options);
}

// The stage the annotations give each node.
std::map<std::string, int64_t> stages_of(const strategy::Strategy& resolved) {
  std::map<std::string, int64_t> stage;
  for (const auto& annotation : resolved.annotations) {
    stage[annotation.match] = annotation.tags.at("PP");
  }
  return stage;
}

// Four Gemm layers of growing width: the last costs more than the three before it together,
// so two stages cut after the third (by op count they would cut after the second).
TEST(AutoStages, CutsTheOpsIntoRunsOfAboutEqualCost) {
  const testing::GemmChain chain({64, 64, 64, 128, 256}, /*input_bias=*/false);
  const strategy::Strategy resolved = resolve(chain, "[0, 1]");
  const auto stage = stages_of(resolved);
  EXPECT_EQ(stage.at("/fc0/Gemm"), 0);
  EXPECT_EQ(stage.at("/fc2/Gemm"), 0);
  EXPECT_EQ(stage.at("/fc3/Gemm"), 1);
  EXPECT_EQ(stage.at("/loss"), 1);
  const auto& pipeline = std::get<strategy::PipelineDirective>(resolved.directives[0].spec);
  EXPECT_FALSE(pipeline.auto_stages);
}

// Four Gemm layers of one width, the first two frozen: every forward costs the same, but the
// frozen layers have no backward (nothing before them is trained), fc2 computes only its
// weight gradient and fc3 its input's too. By forward time the cut falls after fc1; by
// forward plus backward time (F, F, 2F, 3F and the loss) after fc2.
TEST(AutoStages, BalancesForwardPlusBackwardTime) {
  const testing::GemmChain chain({256, 256, 256, 256, 256}, /*input_bias=*/false);
  const auto stage = stages_of(resolve(chain, "[0, 1]", {"w0", "w1"}));
  EXPECT_EQ(stage.at("/fc0/Gemm"), 0);
  EXPECT_EQ(stage.at("/fc1/Gemm"), 0);
  EXPECT_EQ(stage.at("/fc2/Gemm"), 0);
  EXPECT_EQ(stage.at("/fc3/Gemm"), 1);
  EXPECT_EQ(stage.at("/loss"), 1);
  // Trained alike, the four layers split two and two.
  const auto trained = stages_of(resolve(chain, "[0, 1]"));
  EXPECT_EQ(trained.at("/fc1/Gemm"), 0);
  EXPECT_EQ(trained.at("/fc2/Gemm"), 1);
}

TEST(AutoStages, MoreStagesThanOpsIsAnError) {
  const testing::GemmChain chain({64, 64, 64, 128, 256}, /*input_bias=*/false);
  try {
    resolve(chain, "[0, 1, 2, 3, 4, 5]");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("s.json: $.directives[0].stages: the model has 5 ops"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace piper
