// Dropout through the planner and the CPU engine: the planner makes the forward write its
// mask, the backward's gradient is dY · mask / (1 − ratio), and a seed fixes the masks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "engine/runtime/session.h"
#include "formats/atomic_file.h"
#include "onnx_builder.h"
#include "planner/plan_model.h"

namespace piper {
namespace {

using testing::OnnxBuilder;

constexpr float kRatio = 0.25f;

std::vector<float> Values(size_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(generator);
  return values;
}

// loss = Σ r · Dropout(a, 0.25, true) over a [8, 16] parameter a; with `mask_output` the
// model names the mask itself, otherwise the planner adds it.
class DropoutGradient : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    OnnxBuilder b;
    b.initializer("a", {8, 16}, Values(128, 1));
    b.initializer("r", {8, 16}, Values(128, 2));
    OnnxBuilder::attr(b.node("Constant", {}, {"ratio"}), "value_float", kRatio);
    auto& training = b.node("Constant", {}, {"training"});
    auto* attr = training.add_attribute();
    attr->set_name("value");
    attr->set_type(onnx::AttributeProto::TENSOR);
    attr->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
    attr->mutable_t()->add_int32_data(1);
    mask_name_ = GetParam() ? "m" : "/drop/mask";
    b.node("Dropout", {"a", "ratio", "training"},
           GetParam() ? std::vector<std::string>{"out", "m"} : std::vector<std::string>{"out"},
           "/drop");
    b.node("Mul", {"out", "r"}, {"weighted"});
    OnnxBuilder::attr(b.node("ReduceSum", {"weighted"}, {"loss"}), "keepdims", int64_t{0});
    b.output("loss", {});
    dir_ = std::filesystem::temp_directory_path() /
           ("piper_dropout_" + std::to_string(GetParam()) + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string model_path = (dir_ / "model.onnx").string();
    formats::write_file_atomically(model_path, b.model().SerializeAsString());
    strategy::Strategy strategy;
    strategy.source = "dropout_gradient_test";
    strategy.global_batch = 1;
    strategy.optimizer.lr = 0;
    strategy.frozen = {"r"};
    plan_ = planner::plan_model(model_path, strategy).plans.at(0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // One step with `seed`: the mask the forward drew and the gradient of a.
  std::pair<std::vector<uint8_t>, std::vector<float>> Step(uint64_t seed) {
    engine::Session session(plan_, engine::make_backend("cpu"), {seed});
    session.step({});
    return {session.read_tensor(mask_name_), session.read_floats("grad/a")};
  }

  std::filesystem::path dir_;
  std::string mask_name_;
  plan::Plan plan_;
};

TEST_P(DropoutGradient, IsUpstreamTimesMaskOverKeepProbability) {
  const auto [mask, grad] = Step(11);
  const std::vector<float> r = Values(128, 2);
  ASSERT_EQ(mask.size(), r.size());
  ASSERT_EQ(grad.size(), r.size());
  int kept = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    kept += mask[i];
    EXPECT_FLOAT_EQ(grad[i], mask[i] ? r[i] / (1 - kRatio) : 0.0f) << "element " << i;
  }
  EXPECT_GT(kept, 64);  // about 96 of 128 kept
  EXPECT_LT(kept, 128);
}

TEST_P(DropoutGradient, SameSeedSameMaskOtherSeedAnother) {
  const auto first = Step(11);
  EXPECT_EQ(first, Step(11));
  EXPECT_NE(first.first, Step(12).first);
}

INSTANTIATE_TEST_SUITE_P(Dropout, DropoutGradient, ::testing::Bool(), [](const auto& info) {
  return info.param ? "MaskInModel" : "MaskAddedByPlanner";
});

}  // namespace
}  // namespace piper
