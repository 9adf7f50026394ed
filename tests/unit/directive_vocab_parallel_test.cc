// Vocabulary parallelism (planner/directives/vocab_parallel.h) on a tied language model:
// ids -Gather(wte)-> h -Gemm(wte^T)-> logits -SoftmaxCrossEntropyLoss(labels). Numerics
// against one process: tests/integration/test_tensor_parallel.py.
#include <gtest/gtest.h>

#include <algorithm>

#include "directive_fixture.h"
#include "planner/ir/text.h"

namespace piper {
namespace {

constexpr int64_t kVocab = 8, kHidden = 4, kBatch = 6;

ir::TaskGraph tied_task_graph(const std::string& reduction) {
  testing::OnnxBuilder b;
  b.input("ids", {-1}, onnx::TensorProto::INT64)
      .input("y", {-1}, onnx::TensorProto::INT64)
      .output("loss", {});
  b.initializer("wte", {kVocab, kHidden}, std::vector<float>(kVocab * kHidden, 0.1f));
  b.node("Gather", {"wte", "ids"}, {"h"}, "/tok/Gather");
  testing::OnnxBuilder::attr(b.node("Gemm", {"h", "wte"}, {"z"}, "/head/Gemm"), "transB",
                             int64_t{1});
  auto& loss = b.node("SoftmaxCrossEntropyLoss", {"z", "y"}, {"loss"}, "/loss");
  testing::OnnxBuilder::attr(loss, "ignore_index", int64_t{-100});
  auto* attribute = loss.add_attribute();
  attribute->set_name("reduction");
  attribute->set_type(onnx::AttributeProto::STRING);
  attribute->set_s(reduction);
  ir::OpGraph graph = planner::import_model(b.model(), {.batch = kBatch}, "tied.onnx");
  planner::differentiate(graph);
  planner::add_optimizer(
      graph, strategy::parse_strategy(R"({"batch": {"global": 6}, "optimizer": {"type": "sgd"}})",
                                      "test.json")
                 .optimizer);
  return ir::build_task_graph(std::move(graph));
}

bool has_vocabulary(const ir::Shape& shape) {
  return std::find(shape.begin(), shape.end(), kVocab) != shape.end();
}

TEST(VocabParallel, NeitherTheTableNorTheLogitsAreGathered) {
  for (const std::string reduction : {"mean", "sum"}) {
    SCOPED_TRACE(reduction);
    ir::TaskGraph graph = tied_task_graph(reduction);
    testing::apply_directives(graph, R"([{"op": "shard", "devices": [0, 1],
                                          "params": {"wte": 0}}])");
    const ir::OpGraph& ops = graph.op_graph();
    const std::string text = ir::print(graph);
    // The table and the logits hold one block of the vocabulary each, and so does the table's
    // gradient (the lookup's and the head's, summed).
    EXPECT_NE(text.find("\ntensor wte f32[4,4] parameter init=wte placement=S(0)\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\ntensor z f32[6,4] activation placement=S(1)\n"), std::string::npos)
        << text;
    const ir::TrainedParameter& wte = ops.trained.at(0);
    EXPECT_EQ(ops.tensor(wte.gradient).placement, ir::Placement::sharded(0));
    EXPECT_EQ(ops.tensor(wte.gradient).shape, (ir::Shape{kVocab / 2, kHidden}));
    int gathers = 0, all_reduces = 0;
    for (const ir::Op& op : ops.ops()) {
      EXPECT_NE(op.type, "SoftmaxCrossEntropyLoss") << op.name;
      EXPECT_NE(op.type, "piper.SoftmaxCrossEntropyLossGrad") << op.name;
      EXPECT_NE(op.type, "Gather") << op.name;
      EXPECT_NE(op.type, "piper.GatherGrad") << op.name;
      // Every collective moves rows (the members' maxima [2, N], sums [N], the embedding
      // [N, d]), never a tensor with the vocabulary's extent.
      if (op.type == "piper.AllGather" || op.type == "piper.AllReduce" ||
          op.type == "piper.ReduceScatter") {
        for (ir::TensorId t : op.inputs)
          EXPECT_FALSE(has_vocabulary(ops.tensor(t).shape)) << op.name;
        for (ir::TensorId t : op.outputs) {
          EXPECT_FALSE(has_vocabulary(ops.tensor(t).shape)) << op.name;
        }
        gathers += op.type == "piper.AllGather";
        all_reduces += op.type == "piper.AllReduce" && op.pass == ir::Pass::kForward;
      }
    }
    // The maxima's all-gather; the embedding, the sum of exp and the target logit all-reduced.
    EXPECT_EQ(gathers, 1) << text;
    EXPECT_EQ(all_reduces, 3) << text;
    // No whole vocabulary anywhere but the members' offsets constant [2].
    for (const ir::Tensor& tensor : ops.tensors()) {
      if (tensor.shape.size() >= 2) {
        EXPECT_FALSE(has_vocabulary(tensor.shape)) << tensor.name;
      }
    }
    EXPECT_TRUE(ir::verify(graph).empty());
  }
}

TEST(VocabParallel, LogitsSplitAlongRowsKeepTheWholeLoss) {
  // Split along the hidden dimension instead, the head's product is a partial sum the loss
  // reads whole: nothing to rewrite, and the loss op stays.
  ir::TaskGraph graph = tied_task_graph("mean");
  testing::apply_directives(graph, R"([{"op": "shard", "devices": [0, 1],
                                        "params": {"wte": 1}}])");
  const auto& ops = graph.op_graph().ops();
  EXPECT_TRUE(std::any_of(ops.begin(), ops.end(),
                          [](const ir::Op& op) { return op.type == "SoftmaxCrossEntropyLoss"; }));
  EXPECT_TRUE(ir::verify(graph).empty());
}

// The rules the rewrite relies on: a batched GatherND (and its gradient) keeps a split batch
// dimension split when both operands hold it split; GatherElements a dimension other than
// its axis. verify() rejects an operand placed otherwise.
std::vector<std::string> verify_one_op(const std::string& tensors, const std::string& op) {
  return ir::verify(
      ir::parse("shard_groups [0,1]\n" + tensors + op + "task 0 compute F devices=[0] ops=[0]\n"));
}

TEST(VocabParallel, BatchedGathersKeepTheirSplitBatchDimension) {
  const std::string nd = R"(
tensor data f32[1,4,3] parameter init=data placement=S(0)
tensor ids i64[1,5,1] input placement=S(0)
tensor whole_ids i64[2,5,1] input
tensor rows f32[1,5,3] activation placement=S(0)
tensor dy f32[1,5,3] input placement=S(0)
tensor ddata f32[1,4,3] activation placement=S(0)
)";
  EXPECT_EQ(verify_one_op(nd, "op 0 GatherND \"g\" (data, ids) -> (rows) {batch_dims=1}\n"),
            std::vector<std::string>{});
  EXPECT_EQ(
      verify_one_op(nd, "op 0 piper.GatherNDGrad \"g\" (dy, ids) -> (ddata) {batch_dims=1}\n"),
      std::vector<std::string>{});
  const auto wrong =
      verify_one_op(nd, "op 0 GatherND \"g\" (data, whole_ids) -> (rows) {batch_dims=1}\n");
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_NE(wrong[0].find("reads 'whole_ids' placed R but needs it S(0)"), std::string::npos)
      << wrong[0];
  const std::string elements = R"(
tensor x f32[6,1,4] input placement=S(1)
tensor at i64[6,1,1] input placement=S(1)
tensor picked f32[6,1,1] activation placement=S(1)
)";
  EXPECT_EQ(verify_one_op(elements, "op 0 GatherElements \"g\" (x, at) -> (picked) {axis=2}\n"),
            std::vector<std::string>{});
  // Split along the gathered axis, the indices address the whole dimension: gathered first.
  const auto along_axis =
      verify_one_op(elements, "op 0 GatherElements \"g\" (x, at) -> (picked) {axis=1}\n");
  EXPECT_FALSE(along_axis.empty());
}

}  // namespace
}  // namespace piper
