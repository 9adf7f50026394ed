// The gradient norm pass (planner/gradient_norm.h) through planning and lowering: the ranks'
// shares of samples/mlp's gradients count every element once, however the strategy holds
// them; an all-reduce over every rank adds them; every update reads the norm.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "formats/strategy.h"
#include "planner/plan_model.h"

namespace piper {
namespace {

std::vector<plan::Plan> mlp_plans(const std::string& directives,
                                  const std::string& annotations = "[]") {
  const std::string text = R"({"batch": {"global": 12}, "optimizer": {"type": "adamw"},
      "annotations": )" + annotations +
                           R"(, "directives": )" + directives + "}";
  const strategy::Strategy strategy = strategy::parse_strategy(text, "gradient_norm_test.json");
  return planner::plan_model(PIPER_SOURCE_DIR "/samples/mlp/model.onnx", strategy, {}).plans;
}

// fc1 32x64, fc2 64x64, fc3 64x10, each with a bias.
const std::map<std::string, int64_t> kParameters = {{"fc1.weight", 64 * 32}, {"fc1.bias", 64},
                                                    {"fc2.weight", 64 * 64}, {"fc2.bias", 64},
                                                    {"fc3.weight", 10 * 64}, {"fc3.bias", 10}};

const plan::Kernel& only_kernel(const plan::Plan& plan, const std::string& op_type) {
  const plan::Kernel* found = nullptr;
  for (const plan::Stream& stream : plan.streams()) {
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (instruction.kernel().op_type() != op_type) continue;
      EXPECT_EQ(found, nullptr) << "rank " << plan.header().rank() << ": two " << op_type;
      found = &instruction.kernel();
    }
  }
  EXPECT_NE(found, nullptr) << "rank " << plan.header().rank() << ": no " << op_type;
  return found ? *found : plan::Kernel::default_instance();
}

std::vector<int64_t> ints(const plan::Kernel& kernel, const std::string& name) {
  for (const plan::Attribute& attribute : kernel.attributes()) {
    if (attribute.name() == name)
      return {attribute.ints().values().begin(), attribute.ints().values().end()};
  }
  ADD_FAILURE() << "no attribute " << name;
  return {};
}

// Elements each parameter's gradient adds over every rank; checks the plan's names and the
// updates on the way.
std::map<std::string, int64_t> counted_elements(const std::vector<plan::Plan>& plans) {
  std::map<std::string, int64_t> counted;
  for (const plan::Plan& plan : plans) {
    const plan::Kernel& sum = only_kernel(plan, "piper.SumSquares");
    const std::vector<int64_t> counts = ints(sum, "counts");
    EXPECT_EQ(plan.gradient_norm().gradients_size(), sum.inputs_size());
    if (counts.size() != static_cast<size_t>(sum.inputs_size())) {
      ADD_FAILURE() << "rank " << plan.header().rank() << ": one count per input expected";
      break;
    }
    for (int i = 0; i < sum.inputs_size(); ++i) {
      const plan::NormedGradient& gradient = plan.gradient_norm().gradients(i);
      EXPECT_EQ(gradient.tensor(), sum.inputs(i));
      EXPECT_EQ(plan.tensors(gradient.tensor()).role(), plan::GRADIENT) << gradient.parameter();
      counted[gradient.parameter()] += counts[i];
    }
    const int norm = plan.gradient_norm().norm();
    EXPECT_EQ(plan.tensors(norm).name(), "grad_norm");
    EXPECT_EQ(only_kernel(plan, "Sqrt").outputs(0), norm);
    int updates = 0;
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        const plan::Kernel& kernel = instruction.kernel();
        if (kernel.op_type() != "piper.AdamW") continue;
        ++updates;
        EXPECT_EQ(kernel.inputs(kernel.inputs_size() - 1), norm) << instruction.label();
      }
    }
    EXPECT_GT(updates, 0) << "rank " << plan.header().rank();
  }
  return counted;
}

// The norm's all-reduce: one float over a group of every rank.
void expect_one_scalar_all_reduce(const plan::Plan& plan, int world) {
  int found = 0;
  for (const plan::Stream& stream : plan.streams()) {
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (!instruction.has_collective()) continue;
      const plan::Collective& collective = instruction.collective();
      if (plan.tensors(collective.inputs(0)).name() != "grad_norm/sum_squares") continue;
      ++found;
      EXPECT_EQ(collective.kind(), plan::Collective::ALL_REDUCE);
      EXPECT_FALSE(collective.average());
      ASSERT_EQ(collective.inputs_size(), 1);
      EXPECT_EQ(plan.tensors(collective.inputs(0)).bytes(), 4u);
      for (const plan::CommGroup& group : plan.groups()) {
        if (group.id() == collective.group()) {
          EXPECT_EQ(group.ranks_size(), world);
        }
      }
    }
  }
  EXPECT_EQ(found, world > 1 ? 1 : 0) << "rank " << plan.header().rank();
}

TEST(GradientNorm, OneRankCountsEveryGradientWhole) {
  const std::vector<plan::Plan> plans = mlp_plans("[]");
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(counted_elements(plans), kParameters);
  expect_one_scalar_all_reduce(plans[0], 1);
}

TEST(GradientNorm, ReplicasOfAllReducedGradientsEachCountOneSlice) {
  for (const int stage : {0, 1}) {
    const std::vector<plan::Plan> plans = mlp_plans(
        R"([{"op": "zero", "stage": )" + std::to_string(stage) + R"(, "devices": [0, 1, 2]}])");
    ASSERT_EQ(plans.size(), 3u);
    EXPECT_EQ(counted_elements(plans), kParameters) << "ZeRO-" << stage;
    for (const plan::Plan& plan : plans) expect_one_scalar_all_reduce(plan, 3);
  }
}

TEST(GradientNorm, ShardsOfReducedGradientsCountWhole) {
  for (const int stage : {2, 3}) {
    const std::vector<plan::Plan> plans =
        mlp_plans(R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
                      {"op": "zero", "stage": )" +
                  std::to_string(stage) + R"(, "devices": [0, 1, 2]}])");
    // Each rank sums its whole shard: the last one's zero padding adds nothing.
    std::map<std::string, int64_t> padded;
    for (const auto& [name, elements] : kParameters) padded[name] = 3 * ((elements + 2) / 3);
    EXPECT_EQ(counted_elements(plans), padded) << "ZeRO-" << stage;
    for (const plan::Plan& plan : plans) expect_one_scalar_all_reduce(plan, 3);
  }
}

TEST(GradientNorm, PipelineStagesCountTheirOwnParameters) {
  const std::vector<plan::Plan> plans =
      mlp_plans(R"([{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1],
                     "num_microbatches": 2}])",
                R"([{"match": "/fc1/*", "tags": {"PP": 0}}, {"match": "/fc2/*", "tags": {"PP": 1}},
                    {"match": "/fc3/*", "tags": {"PP": 1}}])");
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(counted_elements(plans), kParameters);
  EXPECT_EQ(plans[0].gradient_norm().gradients_size(), 2);  // fc1's weight and bias
  for (const plan::Plan& plan : plans) expect_one_scalar_all_reduce(plan, 2);
}

}  // namespace
}  // namespace piper
