// Token means over a divided batch (planner/token_mean.h): the rewrite in the IR's text form,
// its refusals, and the label counts lowering writes into the plans.
#include "planner/token_mean.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "formats/error.h"
#include "formats/strategy.h"
#include "planner/ir/text.h"
#include "planner/plan_model.h"

namespace piper::planner {
namespace {

using ::testing::HasSubstr;

// Scores [4, 3, 5] and labels [4, 5] (a batch of 4 rows of 5 tokens, 3 classes), the labels
// reshaped to [20] as HF models do before the loss.
std::string loss_graph(const std::string& loss_type, const std::string& attributes,
                       const std::string& label_source = "Reshape") {
  return R"(tensor scores f32[20,3] input
tensor labels i64[4,5] input high=3
tensor shape i64[1] constant data=[20]
tensor flat i64[20] activation
tensor loss f32[] loss
op 0 )" + label_source +
         R"( "/Reshape" (labels, shape) -> (flat)
op 1 )" + loss_type +
         R"( "/loss" (scores, flat) -> (loss) )" + attributes + R"(
inputs scores labels
loss loss
)";
}

std::string rewritten(const std::string& text, int64_t parts) {
  ir::TaskGraph graph = ir::parse(text);
  make_token_means_global(graph.op_graph(), parts, "m.onnx", "s.json");
  return ir::print(graph);
}

std::string refusal(const std::string& text, int64_t parts) {
  try {
    rewritten(text, parts);
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "no error for\n" << text;
  return "";
}

TEST(TokenMeanTest, DividesTheSumOfEachPartByTheStepsLabelCount) {
  for (const std::string type : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    const std::string text =
        rewritten(loss_graph(type, R"({ignore_index=-100, reduction="mean"})"), 4);
    EXPECT_EQ(
        text,
        R"(tensor scores f32[20,3] input
tensor labels i64[4,5] input high=3
tensor shape i64[1] constant data=[20]
tensor flat i64[20] activation
tensor loss f32[] loss
tensor loss/sum f32[] activation
tensor /loss/labelled_entries f32[] input counts=(labels, -100)
tensor loss/scaled f32[] activation
tensor /loss/parts f32[] constant data=[4.0]
op 0 Reshape "/Reshape" (labels, shape) -> (flat) pass=F tags={}
op 1 )" + type +
            R"( "/loss" (scores, flat) -> (loss/sum) {ignore_index=-100, reduction="sum"} pass=F tags={}
op 2 Mul "/loss/times_parts" (loss/sum, /loss/parts) -> (loss/scaled) pass=F tags={}
op 3 Div "/loss/over_labelled_entries" (loss/scaled, /loss/labelled_entries) -> (loss) pass=F tags={}
inputs scores labels
loss loss
)");
  }
}

TEST(TokenMeanTest, CountsTheWindowOfShiftedLabels) {
  // labels[:, 1:], as HF causal language models shift them before the loss.
  const std::string text = rewritten(R"(tensor scores f32[16,3] input
tensor labels i64[4,5] input high=3
tensor one i64[1] constant data=[1]
tensor end i64[1] constant data=[9223372036854775807]
tensor shape i64[1] constant data=[16]
tensor shifted i64[4,4] activation
tensor flat i64[16] activation
tensor loss f32[] loss
op 0 Slice "/Slice" (labels, one, end, one, one) -> (shifted)
op 1 Reshape "/Reshape" (shifted, shape) -> (flat)
op 2 SoftmaxCrossEntropyLoss "/loss" (scores, flat) -> (loss) {ignore_index=-100}
inputs scores labels
loss loss
)",
                                     2);
  EXPECT_NE(text.find("tensor /loss/labelled_entries f32[] input counts=(labels, -100, "
                      "[(1, 1, 4)])\n"),
            std::string::npos)
      << text;
  // A slice of the batch dimension, or one after a reshape, is no window of each sample.
  const std::string batch_slice = R"(tensor scores f32[12,3] input
tensor labels i64[4,3] input
tensor one i64[1] constant data=[1]
tensor zero i64[1] constant data=[0]
tensor shape i64[1] constant data=[12]
tensor shifted i64[3,3] activation
tensor flat i64[9] activation
tensor loss f32[] loss
op 0 Slice "/Slice" (labels, one, shape, zero) -> (shifted)
op 1 Reshape "/Reshape" (shifted, shape) -> (flat)
op 2 SoftmaxCrossEntropyLoss "/loss" (scores, flat) -> (loss) {ignore_index=-100}
inputs scores labels
loss loss
)";
  EXPECT_THAT(refusal(batch_slice, 2), HasSubstr("labels 'flat' are computed in the graph"));
}

TEST(TokenMeanTest, LeavesExactMeansAlone) {
  // One part, or a mean over every entry (equal in every part): nothing to rewrite.
  const std::string token_mean = loss_graph("SoftmaxCrossEntropyLoss", "{ignore_index=-100}");
  EXPECT_EQ(rewritten(token_mean, 1), ir::print(ir::parse(token_mean)));
  const std::string plain_mean = loss_graph("SoftmaxCrossEntropyLoss", R"({reduction="mean"})");
  EXPECT_EQ(rewritten(plain_mean, 2), ir::print(ir::parse(plain_mean)));
}

TEST(TokenMeanTest, RefusesSumsWeightsAndComputedLabels) {
  EXPECT_THAT(refusal(loss_graph("SoftmaxCrossEntropyLoss", R"({reduction="sum"})"), 2),
              HasSubstr("m.onnx: the loss node '/loss' sums over the "
                        "batch (reduction \"sum\"), but s.json divides the batch"));
  const std::string computed =
      refusal(loss_graph("NegativeLogLikelihoodLoss", "{ignore_index=0}", "Neg"), 2);
  EXPECT_THAT(computed, HasSubstr("m.onnx: the loss node '/loss' has an ignore_index"));
  EXPECT_THAT(computed, HasSubstr("the labelled-token count must come from the labels, but its "
                                  "labels 'flat' are computed in the graph"));
  std::string weighted = loss_graph("SoftmaxCrossEntropyLoss", "{ignore_index=-100}");
  weighted.replace(weighted.find("(scores, flat)"), 14, "(scores, flat, weights)");
  weighted.insert(0, "tensor weights f32[3] constant data=[1.0,2.0,3.0]\n");
  EXPECT_THAT(refusal(weighted, 2), HasSubstr("'/loss' weighs classes, so its mean divides "
                                              "by the sum of the labelled entries' weights"));
}

// The class loss as a term of the loss (HF Mixtral adds its load-balancing term): `combine`
// reads the token mean `ce` and the term `extra` (or `ce` twice).
std::string term_graph(const std::string& combine) {
  return R"(tensor scores f32[20,3] input
tensor labels i64[4,5] input high=3
tensor shape i64[1] constant data=[20]
tensor extra f32[] parameter
tensor flat i64[20] activation
tensor ce f32[] activation
tensor loss f32[] loss
op 0 Reshape "/Reshape" (labels, shape) -> (flat)
op 1 SoftmaxCrossEntropyLoss "/ce" (scores, flat) -> (ce) {ignore_index=-100}
op 2 )" + combine +
         R"( -> (loss)
inputs scores labels
loss loss
)";
}

TEST(TokenMeanTest, RewritesAClassLossTheLossReadsLinearly) {
  const std::string text = rewritten(term_graph(R"(Add "/Add" (ce, extra))"), 2);
  EXPECT_THAT(text, HasSubstr(R"(op 1 SoftmaxCrossEntropyLoss "/ce" (scores, flat) -> (ce/sum) )"
                              R"({ignore_index=-100, reduction="sum"} pass=F tags={}
op 2 Mul "/ce/times_parts" (ce/sum, /ce/parts) -> (ce/scaled) pass=F tags={}
op 3 Div "/ce/over_labelled_entries" (ce/scaled, /ce/labelled_entries) -> (ce) pass=F tags={}
op 4 Add "/Add" (ce, extra) -> (loss) pass=F tags={})"));
  // Times a parameter (the same on every part) is as linear.
  EXPECT_THAT(rewritten(term_graph(R"(Mul "/Mul" (extra, ce))"), 2),
              HasSubstr(R"(Div "/ce/over_labelled_entries")"));
}

TEST(TokenMeanTest, RefusesAClassLossTheLossReadsOtherwise) {
  EXPECT_THAT(refusal(term_graph(R"(Mul "/Mul" (ce, ce))"), 2),
              HasSubstr("m.onnx: the loss node '/ce' has an ignore_index, and s.json divides "
                        "the batch into microbatches or replicas, whose losses Piper averages, "
                        "so each part's mean divides by the step's count of labelled entries; "
                        "but the loss reads 'ce' other than through sums and products with "
                        "constants"));
}

// samples/mlp's loss is F.cross_entropy, which PyTorch exports with ignore_index -100.
std::vector<plan::Plan> mlp_plans(const std::string& directives) {
  const strategy::Strategy strategy = strategy::parse_strategy(
      R"({"batch": {"global": 12}, "directives": )" + directives + "}", "token_mean_test.json");
  return plan_model(PIPER_SOURCE_DIR "/samples/mlp/model.onnx", strategy, {}).plans;
}

TEST(TokenMeanTest, EveryRankCountsTheLabelsOfEveryMicrobatch) {
  const std::vector<plan::Plan> plans = mlp_plans(
      R"([{"op": "split", "filter": {}, "dim_name": "batch", "num_microbatches": 2},
          {"op": "place", "filter": {}, "devices": [0, 1]},
          {"op": "replicate", "filter": {}, "devices": [0, 1]}])");
  ASSERT_EQ(plans.size(), 2u);
  for (const plan::Plan& plan : plans) {
    ASSERT_EQ(plan.label_counts_size(), 2) << "one per microbatch";
    for (const plan::LabelCount& count : plan.label_counts()) {
      EXPECT_EQ(count.input(), "y");
      EXPECT_EQ(count.ignore_index(), -100);
      EXPECT_EQ(count.int_high(), 10);
      EXPECT_TRUE(count.sample_shape().empty());
      const plan::Tensor& tensor = plan.tensors(count.tensor());
      EXPECT_EQ(tensor.dtype(), plan::FLOAT32);
      EXPECT_EQ(tensor.shape_size(), 0);
      for (const plan::BatchInput& input : plan.inputs()) {
        EXPECT_NE(input.tensor(), count.tensor()) << "a count is not fed rows";
      }
    }
  }
  EXPECT_EQ(mlp_plans("[]").front().label_counts_size(), 0) << "one process needs no count";
}

}  // namespace
}  // namespace piper::planner
