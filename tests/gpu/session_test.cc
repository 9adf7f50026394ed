// The CUDA backend under whole plans: streams ordered by events on the device, faults
// found on the device reported by the step, and samples/gpt trained for 20 steps on CUDA
// and on the CPU from the same weights and batches.
#include "engine/runtime/session.h"

#include <gmock/gmock.h>

#include <cmath>

#include "engine/runtime/data.h"
#include "formats/error.h"
#include "formats/strategy.h"
#include "planner/plan_model.h"
#include "tests/gpu/op_harness.h"
#include "tests/unit/engine_test_util.h"

namespace piper::engine::testing {
namespace {

using ::testing::HasSubstr;

using CudaSession = CudaTest;

// Two streams take turns updating one tensor in place, each turn handed over by an event:
// any misordering between the CUDA streams changes the result.
TEST_F(CudaSession, StreamsTakeTurnsThroughEvents) {
  constexpr int kRounds = 20;
  constexpr int64_t kSize = 1 << 20;
  PlanBuilder b;
  const int t = b.Tensor("t", {kSize});
  const int one = b.Tensor("one", {}, plan::FLOAT32, plan::CONSTANT);
  const int two = b.Tensor("two", {}, plan::FLOAT32, plan::CONSTANT);
  b.Constant<float>(one, {1.0f});
  b.Constant<float>(two, {2.0f});
  for (int k = 0; k < kRounds; ++k) {
    if (k > 0) b.Wait("s0", 2 * k - 1);
    b.Kernel("s0", "Add", {t, one}, {t});
    b.Record("s0", 2 * k);
    b.Wait("s1", 2 * k);
    b.Kernel("s1", "Mul", {t, two}, {t});
    b.Record("s1", 2 * k + 1);
  }
  Session session(b.Build(), std::move(cuda_));
  double expected = 0;
  for (int k = 0; k < kRounds; ++k) expected = (expected + 1) * 2;
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> zeros(kSize, 0.0f);
    session.write_tensor("t", zeros.data(), zeros.size() * sizeof(float));
    session.step({});
    const auto values = session.read_floats("t");
    ASSERT_EQ(values.front(), expected) << "step " << step;
    ASSERT_EQ(values.back(), expected) << "step " << step;
  }
}

TEST_F(CudaSession, AnIndexOutOfRangeFailsTheStepNamingTheOp) {
  PlanBuilder b;
  const int table = b.Tensor("table", {8, 4});
  const int indices = b.Tensor("indices", {3}, plan::INT64, plan::CONSTANT);
  const int out = b.Tensor("out", {3, 4});
  b.Constant<int64_t>(indices, {1, 99, 2});
  b.Kernel("s", "Gather", {table, indices}, {out});
  Session session(b.Build(), std::move(cuda_));
  try {
    session.step({});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Gather: index 99 at position 1 is out of range for an "
                                        "axis of size 8"));
  }
}

// A target out of range fails the step with the CPU kernel's message.
TEST_F(CudaSession, ALossLabelOutOfRangeFailsTheStepAsOnTheCpu) {
  PlanBuilder b;
  const int input = b.Tensor("input", {3, 4});
  const int target = b.Tensor("target", {3}, plan::INT64, plan::CONSTANT);
  const int loss = b.Tensor("loss", {});
  b.Constant<int64_t>(target, {1, 2, 7});
  b.Kernel("s", "NegativeLogLikelihoodLoss", {input, target}, {loss});
  const plan::Plan plan = b.Build();
  const auto failure = [&](std::unique_ptr<Backend> backend) -> std::string {
    Session session(plan, std::move(backend));
    try {
      session.step({});
    } catch (const Error& error) {
      return error.what();
    }
    return "no error";
  };
  const std::string expected =
      "NegativeLogLikelihoodLoss: target 7 at position 2 is outside the 4 classes [0, 4); check "
      "the target data";
  EXPECT_THAT(failure(std::move(cuda_)), HasSubstr(expected));
  EXPECT_THAT(failure(make_backend("cpu")), HasSubstr(expected));
}

// samples/gpt, 20 AdamW steps in float32: the losses agree with the CPU's within 1e-4
// relative, and so do the trained weights within 1e-3.
TEST_F(CudaSession, GptTrainsAsOnTheCpu) {
  const strategy::Strategy strategy = strategy::parse_strategy(
      R"({"batch": {"global": 8}, "optimizer": {"type": "adamw", "lr": 1e-3,
          "weight_decay": 0.01}, "frozen": ["*mask*"]})",
      "gpt test strategy");
  const auto planned =
      planner::plan_model(std::string(PIPER_SOURCE_DIR) + "/samples/gpt/model.onnx", strategy);
  const plan::Plan& plan = planned.plans.at(0);
  Session on_cuda(plan, std::move(cuda_), {5});
  Session on_cpu(plan, make_backend("cpu"), {5});
  const auto source = make_synthetic_source(plan, 5);
  for (int64_t step = 0; step < 20; ++step) {
    const Batch batch = source->batch(step);
    const double cuda_loss = on_cuda.step(batch);
    const double cpu_loss = on_cpu.step(batch);
    ASSERT_TRUE(std::isfinite(cuda_loss)) << "step " << step + 1;
    EXPECT_NEAR(cuda_loss, cpu_loss, 1e-4 * std::abs(cpu_loss))
        << "step " << step + 1 << ": cuda " << cuda_loss << ", cpu " << cpu_loss;
  }
  const auto cuda_weights = on_cuda.trained_parameters();
  for (const auto& [name, bytes] : on_cpu.trained_parameters()) {
    const auto* expected = reinterpret_cast<const float*>(bytes.data());
    const auto* actual = reinterpret_cast<const float*>(cuda_weights.at(name).data());
    std::vector<float> values(actual, actual + bytes.size() / 4);
    std::vector<double> reference(expected, expected + bytes.size() / 4);
    ExpectNear(values, reference, 1e-5, name, 1e-3);
  }
}

}  // namespace
}  // namespace piper::engine::testing
