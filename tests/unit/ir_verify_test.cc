#include <gtest/gtest.h>

#include <stdexcept>

#include "planner/ir/text.h"
#include "planner/ir/verify.h"

namespace piper::ir {
namespace {

// Two pipeline stages on devices 0 and 1; mb 1 of stage 0 follows mb 0.
const std::string kPipeline = R"(
tensor x f32[4,8] input
tensor w1 f32[8,8] parameter init=w1
tensor w2 f32[8,8] parameter init=w2
tensor h f32[4,8] activation
tensor y f32[4,8] activation
tensor l f32[] loss
op 0 MatMul "/fc1/MatMul" (x, w1) -> (h) tags={PP:0}
op 1 MatMul "/fc2/MatMul" (h, w2) -> (y) tags={PP:1}
op 2 ReduceMean "/loss/ReduceMean" (y) -> (l) {keepdims=0} tags={PP:1}
inputs x
loss l
task 0 compute F mb=0 tags={PP:0} devices=[0] ops=[0]
task 1 send F mb=0 tags={PP:0} devices=[0] stream=p2p tensors=[h] peer=1
task 2 recv F mb=0 tags={PP:1} devices=[1] stream=p2p tensors=[h] peer=0
task 3 compute F mb=0 tags={PP:1} devices=[1] ops=[1,2]
task 4 compute F mb=1 tags={PP:0} devices=[0] ops=[0]
edge 0 -> 1 data
edge 1 -> 2 data
edge 2 -> 3 data
edge 0 -> 4 temporal
)";

// Two data-parallel replicas whose weight gradients meet in an all-reduce.
const std::string kDataParallel = R"(
tensor x f32[4,8] input
tensor w f32[8,8] parameter init=w
tensor y f32[4,8] activation
tensor dw f32[8,8] gradient
tensor w_next f32[8,8] parameter
op 0 MatMul "/fc/MatMul" (x, w) -> (y)
op 1 piper.MatMulWeightGrad "/fc/MatMul_wgrad" (x, y) -> (dw) pass=B
op 2 piper.Sgd "/fc/update" (w, dw) -> (w_next) pass=U
trained w grad=dw
task 0 compute F mb=0 devices=[0] ops=[0]
task 1 compute B mb=0 devices=[0] ops=[1]
task 2 compute F mb=1 devices=[1] ops=[0]
task 3 compute B mb=1 devices=[1] ops=[1]
task 4 all_reduce B mb=0 devices=[0,1] stream=dp tensors=[dw]
task 5 compute U mb=0 devices=[0,1] ops=[2]
edge 0 -> 1 data
edge 2 -> 3 data
edge 1 -> 4 data
edge 3 -> 4 data
edge 4 -> 5 data
)";

// `text` with its one occurrence of `from` replaced by `to`.
std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in the graph";
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "'" << from << "' is ambiguous";
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// Expects one message per entry of `expected`, each containing that entry.
void expect_messages(const std::string& text, const std::vector<std::string>& expected) {
  const std::vector<std::string> messages = verify(parse(text));
  std::string all;
  for (const std::string& message : messages) all += "\n  " + message;
  ASSERT_EQ(messages.size(), expected.size()) << "messages:" << all;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NE(messages[i].find(expected[i]), std::string::npos)
        << "message " << i << " lacks: " << expected[i] << "\nmessages:" << all;
  }
}

TEST(VerifyTest, ValidGraphsPass) {
  expect_messages(kPipeline, {});
  expect_messages(kDataParallel, {});
}

TEST(VerifyTest, LabelCountOfAFloatTensor) {
  // Tensors are declared before ops, so the count goes right after the loss's tensor.
  expect_messages(replace(kPipeline, "tensor l f32[] loss\n",
                          "tensor l f32[] loss\ntensor n f32[] input counts=(x, -100)\n"),
                  {"tensor n counts the entries of x, which is not an int64 batch input"});
}

TEST(VerifyTest, EdgeToMissingTask) {
  expect_messages(kPipeline + "edge 3 -> 9 data\n",
                  {"edge 4 (3 -> 9) names task 9, which does not exist"});
}

TEST(VerifyTest, Cycle) {
  expect_messages(kPipeline + "edge 3 -> 0 temporal\n",
                  {"temporal edge from task 3 (compute F mb=0 {PP:1}) on devices [1] to "
                   "task 0 (compute F mb=0 {PP:0}) on devices [0] crosses devices",
                   "the task DAG has a cycle: task 0 (compute F mb=0 {PP:0}) -> "
                   "task 1 (send F mb=0 {PP:0}) -> task 2 (recv F mb=0 {PP:1}) -> "
                   "task 3 (compute F mb=0 {PP:1}) -> task 0 (compute F mb=0 {PP:0})"});
}

TEST(VerifyTest, SelfLoop) {
  expect_messages(kPipeline + "edge 4 -> 4 data\n",
                  {"cycle: task 4 (compute F mb=1 {PP:0}) -> task 4 (compute F mb=1 {PP:0})"});
}

TEST(VerifyTest, TemporalEdgeAcrossDevices) {
  expect_messages(kPipeline + "edge 4 -> 3 temporal\n",
                  {"temporal edge from task 4 (compute F mb=1 {PP:0}) on devices [0] to "
                   "task 3 (compute F mb=0 {PP:1}) on devices [1] crosses devices"});
}

TEST(VerifyTest, TaskWithoutDevices) {
  expect_messages(replace(kPipeline, "devices=[1] ops=[1,2]", "devices=[] ops=[1,2]"),
                  {"task 3 (compute F mb=0 {PP:1}) has no devices"});
}

TEST(VerifyTest, NegativeDevice) {
  expect_messages(replace(kDataParallel, "task 0 compute F mb=0 devices=[0]",
                          "task 0 compute F mb=0 devices=[0,-1]"),
                  {"task 0 (compute F mb=0 {}) lists device -1"});
}

TEST(VerifyTest, RepeatedDevice) {
  expect_messages(replace(kDataParallel, "devices=[0,1] ops=[2]", "devices=[0,1,0] ops=[2]"),
                  {"task 5 (compute U mb=0 {}) lists device 0 twice"});
}

TEST(VerifyTest, TaskWithoutStream) {
  expect_messages(replace(kPipeline, "devices=[1] ops=[1,2]", "devices=[1] ops=[1,2] stream=\"\""),
                  {"task 3 (compute F mb=0 {PP:1}) has no stream"});
}

TEST(VerifyTest, UnknownOp) {
  expect_messages(replace(kPipeline, "mb=1 tags={PP:0} devices=[0] ops=[0]",
                          "mb=1 tags={PP:0} devices=[0] ops=[7]"),
                  {"task 4 (compute F mb=1 {PP:0}) lists op 7, which does not exist"});
}

TEST(VerifyTest, OpInTwoTasksOfOneMicrobatch) {
  expect_messages(replace(kPipeline, "task 4 compute F mb=1", "task 4 compute F mb=0"),
                  {"op 0 (MatMul \"/fc1/MatMul\") is in both task 0 (compute F mb=0 {PP:0}) and "
                   "task 4 (compute F mb=0 {PP:0}) for mb 0"});
}

TEST(VerifyTest, InputWithoutDataEdge) {
  expect_messages(replace(kPipeline, "edge 2 -> 3 data\n", ""),
                  {"task 3 (compute F mb=0 {PP:1}) on devices [1] reads 'h' that no task joined "
                   "to it by a data edge writes or receives there; it is written by task 0 "
                   "(compute F mb=0 {PP:0}) on devices [0]"});
}

TEST(VerifyTest, InputWrittenOnAnotherDevice) {
  expect_messages(replace(kPipeline, "edge 2 -> 3 data", "edge 0 -> 3 data"),
                  {"task 3 (compute F mb=0 {PP:1}) on devices [1] reads 'h' that no task"});
}

TEST(VerifyTest, InputFromAnotherMicrobatch) {
  // The recv brings mb 0 of h; task 3 now computes mb 1.
  expect_messages(replace(kPipeline, "task 3 compute F mb=0", "task 3 compute F mb=1"),
                  {"task 3 (compute F mb=1 {PP:1}) on devices [1] reads 'h' that no task joined "
                   "to it by a data edge writes or receives there; it is written by task 4 "
                   "(compute F mb=1 {PP:0}) on devices [0]"});
}

TEST(VerifyTest, InputReadBeforeItsOpInTheSameTask) {
  expect_messages(replace(kPipeline, "ops=[1,2]", "ops=[2,1]"),
                  {"task 3 (compute F mb=0 {PP:1}) on devices [1] reads 'y' before op 1 "
                   "(MatMul \"/fc2/MatMul\") of the same task writes it"});
}

TEST(VerifyTest, ActivationThatNoOpWrites) {
  expect_messages(R"(
tensor a f32[2] activation
tensor b f32[2] activation
op 0 Relu "/relu" (a) -> (b)
task 0 compute F devices=[0] ops=[0]
)",
                  {"task 0 (compute F mb=0 {}) on devices [0] reads 'a' that no task joined to "
                   "it by a data edge writes or receives there; no op writes it"});
}

TEST(VerifyTest, CollectiveResultServesItsDevices) {
  // Without the all-reduce, the update on both devices has no source for dw.
  expect_messages(replace(kDataParallel, "edge 4 -> 5 data", "edge 1 -> 5 data"),
                  {"task 5 (compute U mb=0 {}) on devices [0,1] reads 'dw' that no task joined "
                   "to it by a data edge writes or receives there; it is written by task 1 "
                   "(compute B mb=0 {}) on devices [0] and by task 3 (compute B mb=1 {}) on "
                   "devices [1]"});
}

TEST(VerifyTest, SendWithoutRecv) {
  expect_messages(
      kPipeline + "task 5 send F mb=1 devices=[0] stream=p2p tensors=[h] peer=1\nedge 4 -> 5\n",
      {"task 5 (send F mb=1 {}) of ['h'] on device 0 with peer 1 has no matching recv"});
}

TEST(VerifyTest, RecvWithoutSend) {
  expect_messages(
      kPipeline + "task 5 recv F mb=1 devices=[1] stream=p2p tensors=[h] peer=0\n",
      {"task 5 (recv F mb=1 {}) of ['h'] on device 1 with peer 0 has no matching send"});
}

TEST(VerifyTest, SendWithTwoRecvs) {
  expect_messages(
      kPipeline + "task 5 recv F mb=0 devices=[1] stream=p2p tensors=[h] peer=0\nedge 1 -> 5\n",
      {"task 1 (send F mb=0 {PP:0}) of ['h'] on device 0 with peer 1 has 2 matching recvs: "
       "task 2 (recv F mb=0 {PP:1}), task 5 (recv F mb=0 {})"});
}

TEST(VerifyTest, DuplicateSend) {
  expect_messages(kPipeline +
                      "task 5 send F mb=0 devices=[0] stream=p2p tensors=[h] peer=1\n"
                      "edge 0 -> 5 data\nedge 5 -> 2 data\n",
                  {"task 2 (recv F mb=0 {PP:1}) of ['h'] on device 1 with peer 0 has 2 matching "
                   "sends: task 1 (send F mb=0 {PP:0}), task 5 (send F mb=0 {})"});
}

// Replica i of the writer feeds replica i of the reader: transfers of other replicas differ.
TEST(VerifyTest, SendAndRecvOfDifferentReplicas) {
  expect_messages(
      replace(kPipeline, "tensors=[h] peer=0", "tensors=[h] peer=0 replica=1"),
      {"task 1 (send F mb=0 {PP:0}) of ['h'] on device 0 with peer 1 has no matching recv",
       "task 2 (recv F mb=0 {PP:1}) of ['h'] on device 1 with peer 0 has no matching send"});
}

TEST(VerifyTest, SendWithoutDataEdgeToItsRecv) {
  expect_messages(replace(kPipeline, "edge 1 -> 2 data\n", ""),
                  {"no data edge joins task 1 (send F mb=0 {PP:0}) to its recv task 2 (recv F "
                   "mb=0 {PP:1})"});
}

TEST(VerifyTest, SendOnTwoDevices) {
  expect_messages(
      replace(kPipeline, "devices=[0] stream=p2p", "devices=[0,2] stream=p2p"),
      {"task 1 (send F mb=0 {PP:0}) must list one device and a peer, but lists devices [0,2] "
       "and peer 1",
       "task 2 (recv F mb=0 {PP:1}) of ['h'] on device 1 with peer 0 has no matching send"});
}

TEST(VerifyTest, CollectiveTasksDisagreeOnDevices) {
  expect_messages(kDataParallel + "task 6 all_reduce B mb=0 devices=[0] stream=dp tensors=[dw]\n",
                  {"the all_reduce of task 4 (all_reduce B mb=0 {}) on devices [0,1] and task 6 "
                   "(all_reduce B mb=0 {}) on devices [0] disagree on its devices"});
}

TEST(VerifyTest, ReportsBadIdsInsteadOfThrowing) {
  TaskGraph graph = parse(kPipeline);
  graph.op_graph().op(1).inputs.push_back(42);
  graph.task(1).tensors.push_back(-3);
  const std::vector<std::string> messages = verify(graph);
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0], "op 1 (MatMul \"/fc2/MatMul\") reads tensor id 42, which does not exist");
  EXPECT_EQ(messages[1], "task 1 (send F mb=0 {PP:0}) moves tensor id -3, which does not exist");
}

TEST(VerifyTest, VerifyOrThrowNamesThePass) {
  EXPECT_NO_THROW(verify_or_throw(parse(kPipeline), "after directive 0 (place)"));
  try {
    verify_or_throw(parse(kPipeline + "edge 3 -> 9\nedge 9 -> 3\n"), "after directive 2 (order)");
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& error) {
    EXPECT_STREQ(error.what(),
                 "after directive 2 (order): edge 4 (3 -> 9) names task 9, which does not "
                 "exist; edge 5 (9 -> 3) names task 9, which does not exist");
  }
}

}  // namespace
}  // namespace piper::ir
