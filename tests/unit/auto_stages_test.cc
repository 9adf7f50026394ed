#include "planner/auto_stages.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "formats/error.h"
#include "onnx_builder.h"

namespace piper {
namespace {

// Four Gemm layers of growing width: the last costs more than the three
// before it together, so two stages cut after the third (by op count they
// would cut after the second).
class AutoStages : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::OnnxBuilder b;
    b.input("x", {-1, 64}).input("y", {-1}, onnx::TensorProto::INT64).output("loss", {});
    const int64_t widths[] = {64, 64, 64, 128, 256};
    std::string previous = "x";
    for (int layer = 0; layer < 4; ++layer) {
      const std::string w = "w" + std::to_string(layer);
      b.initializer(w, {widths[layer + 1], widths[layer]},
                    std::vector<float>(widths[layer + 1] * widths[layer], 0.1f));
      const std::string out = "h" + std::to_string(layer);
      testing::OnnxBuilder::attr(
          b.node("Gemm", {previous, w}, {out}, "/fc" + std::to_string(layer) + "/Gemm"), "transB",
          int64_t{1});
      previous = out;
    }
    b.node("SoftmaxCrossEntropyLoss", {previous, "y"}, {"loss"}, "/loss");
    path_ = (std::filesystem::temp_directory_path() /
             ("piper_auto_stages_" + std::to_string(::getpid()) + ".onnx"))
                .string();
    std::ofstream(path_, std::ios::binary) << b.model().SerializeAsString();
  }
  void TearDown() override { std::filesystem::remove(path_); }

  strategy::Strategy resolve(const std::string& devices) {
    const auto written = strategy::parse_strategy(
        R"({"batch": {"global": 64}, "directives": [{"op": "pipeline", "schedule": "1f1b",
            "devices": )" +
            devices + R"(, "num_microbatches": 2, "stages": "auto"}]})",
        "s.json");
    planner::ImportOptions options;
    options.batch = 32;
    return planner::resolve_auto_stages(path_, written, options);
  }

  std::string path_;
};

TEST_F(AutoStages, CutsTheForwardOpsIntoRunsOfAboutEqualCost) {
  const strategy::Strategy resolved = resolve("[0, 1]");
  std::map<std::string, int64_t> stage;
  for (const auto& annotation : resolved.annotations)
    stage[annotation.match] = annotation.tags.at("PP");
  EXPECT_EQ(stage.at("/fc0/Gemm"), 0);
  EXPECT_EQ(stage.at("/fc2/Gemm"), 0);
  EXPECT_EQ(stage.at("/fc3/Gemm"), 1);
  EXPECT_EQ(stage.at("/loss"), 1);
  const auto& pipeline = std::get<strategy::PipelineDirective>(resolved.directives[0].spec);
  EXPECT_FALSE(pipeline.auto_stages);
}

TEST_F(AutoStages, MoreStagesThanOpsIsAnError) {
  try {
    resolve("[0, 1, 2, 3, 4, 5]");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("s.json: $.directives[0].stages: the model has 5 ops"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace piper
