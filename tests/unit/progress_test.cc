// What piper-run reports beside the loss (engine/runtime/progress.h): tokens per sample from the
// plan's token inputs, MFU from the planned FLOPs, the short rates and times of progress lines,
// and which steps print one.
#include "engine/runtime/progress.h"

#include <gtest/gtest.h>

#include <sstream>

namespace piper::engine {
namespace {

plan::Plan with_inputs(const std::vector<std::pair<plan::DType, std::vector<int64_t>>>& inputs) {
  plan::Plan plan;
  for (const auto& [dtype, shape] : inputs) {
    plan::Tensor& tensor = *plan.add_tensors();
    tensor.set_dtype(dtype);
    for (int64_t d : shape) tensor.add_shape(d);
    plan.add_inputs()->set_tensor(plan.tensors_size() - 1);
  }
  return plan;
}

TEST(Progress, TokensPerSampleAreTheLargestIntegerInputsElementsPerSample) {
  // A language model: ids and shifted targets [batch, 16], a float mask.
  EXPECT_EQ(tokens_per_sample(with_inputs(
                {{plan::INT64, {4, 16}}, {plan::INT64, {4, 16}}, {plan::FLOAT32, {4, 16, 16}}})),
            16);
  EXPECT_EQ(tokens_per_sample(with_inputs({{plan::INT64, {2, 3, 5}}})), 15);
  // Class labels [batch] and float features are not tokens.
  EXPECT_EQ(tokens_per_sample(with_inputs({{plan::FLOAT32, {8, 32}}, {plan::INT64, {8}}})),
            std::nullopt);
  EXPECT_EQ(tokens_per_sample(plan::Plan{}), std::nullopt);
}

TEST(Progress, MfuIsPlannedFlopsOverTimeAndPeakOrNothing) {
  plan::Plan plan;
  plan.mutable_planned_step()->set_flops(3e9);
  EXPECT_DOUBLE_EQ(*model_flops_utilization(plan, 0.5, 1e10), 3e9 / 0.5 / 1e10);
  EXPECT_EQ(model_flops_utilization(plan, 0.5, std::nullopt), std::nullopt);
  EXPECT_EQ(model_flops_utilization(plan, 0.0, 1e10), std::nullopt);
  EXPECT_EQ(model_flops_utilization(plan::Plan{}, 0.5, 1e10), std::nullopt);  // older plans
}

TEST(Progress, ShortRatesAndDurations) {
  EXPECT_EQ(short_rate(950), "950");
  EXPECT_EQ(short_rate(12345), "12.3k");
  EXPECT_EQ(short_rate(4561234), "4.56M");
  EXPECT_EQ(short_rate(999.7), "1.00k");
  EXPECT_EQ(short_rate(123456789012.0), "123G");
  EXPECT_EQ(short_duration(0.2), "0s");
  EXPECT_EQ(short_duration(45), "45s");
  EXPECT_EQ(short_duration(192), "3m12s");
  EXPECT_EQ(short_duration(2 * 3600 + 5 * 60 + 30), "2h05m");
}

TEST(Progress, PrintsEveryNStepsAndTheLastWithTheIntervalsRate) {
  std::ostringstream out;
  ProgressLog log(2, 5, 8, 16);  // 8 samples of 16 tokens per step
  for (int64_t step = 1; step <= 5; ++step) log.after_step(step, 2.5 / step, 0.5, out);
  std::istringstream lines(out.str());
  std::vector<std::string> printed;
  for (std::string line; std::getline(lines, line);) printed.push_back(line);
  ASSERT_EQ(printed.size(), 3u) << out.str();
  // 2 steps of 128 tokens in 1 s; the last line covers step 5 alone.
  EXPECT_EQ(printed[0].rfind("step 2/5  loss 1.2500  256 tok/s  ETA ", 0), 0u) << printed[0];
  EXPECT_EQ(printed[1].rfind("step 4/5  loss 0.6250  256 tok/s  ETA ", 0), 0u) << printed[1];
  EXPECT_EQ(printed[2], "step 5/5  loss 0.5000  256 tok/s  ETA 0s");

  std::ostringstream samples;
  ProgressLog without_tokens(1, 1, 32, std::nullopt);
  without_tokens.after_step(1, 1.0, 0.25, samples);
  EXPECT_EQ(samples.str(), "step 1/1  loss 1.0000  128 samples/s  ETA 0s\n");

  std::ostringstream none;
  ProgressLog off(0, 3, 8, 16);
  for (int64_t step = 1; step <= 3; ++step) off.after_step(step, 1.0, 0.5, none);
  EXPECT_EQ(none.str(), "");
}

}  // namespace
}  // namespace piper::engine
