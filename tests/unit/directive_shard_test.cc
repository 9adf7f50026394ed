#include <gtest/gtest.h>

#include <algorithm>

#include "directive_fixture.h"
#include "formats/error.h"
#include "planner/ir/text.h"
#include "planner/lower/lower.h"

namespace piper {
namespace {

using testing::apply_directives;
using testing::two_layer_task_graph;

// Megatron's MLP on the two-layer model: fc1's weight [8, 4] split by rows (output features),
// fc2's [3, 8] by columns (input features).
const char* kMegatron = R"([{"op": "shard", "devices": [0, 1], "params": {"w1": 0, "w2": 1}}])";

int count_ops(const ir::OpGraph& ops, const std::string& type, ir::Pass pass) {
  return static_cast<int>(std::count_if(ops.ops().begin(), ops.ops().end(), [&](const ir::Op& op) {
    return op.type == type && op.pass == pass;
  }));
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(ShardDirective, MegatronMlpAllReducesTheSecondProductOnly) {
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "adamw"})");
  apply_directives(graph, kMegatron);
  const std::string text = ir::print(graph);
  // Each member holds half of each weight; fc1's output and the ReLU are split along the
  // features, fc2's product is a partial sum that one all-reduce makes whole for the loss.
  EXPECT_TRUE(has_line(text, "tensor w1 f32[4,4] parameter init=w1 placement=S(0)")) << text;
  EXPECT_TRUE(has_line(text, "tensor w2 f32[3,4] parameter init=w2 placement=S(1)")) << text;
  EXPECT_TRUE(has_line(text, "tensor r f32[4,4] activation placement=S(1)")) << text;
  EXPECT_TRUE(has_line(text, "tensor z f32[4,3] activation placement=P")) << text;
  EXPECT_TRUE(has_line(text, "shard_groups [0,1]")) << text;
  const ir::OpGraph& ops = graph.op_graph();
  EXPECT_EQ(count_ops(ops, "piper.AllReduce", ir::Pass::kForward), 1);
  // The backward needs no input gradient (x is data), so it communicates nothing: each
  // member's weight gradients are its own blocks'.
  EXPECT_EQ(count_ops(ops, "piper.AllReduce", ir::Pass::kBackward), 0) << text;
  for (const ir::TrainedParameter& trained : ops.trained) {
    EXPECT_EQ(ops.tensor(trained.gradient).placement, ops.tensor(trained.parameter).placement);
    EXPECT_EQ(ops.tensor(trained.gradient).shape, ops.tensor(trained.parameter).shape);
  }
  EXPECT_TRUE(ir::verify(graph).empty());
}

TEST(ShardDirective, LowersEachMembersBlockAndItsGroup) {
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "sgd"})");
  apply_directives(graph, kMegatron);
  EXPECT_EQ(graph.num_ranks(), 2);
  for (int rank = 0; rank < 2; ++rank) {
    const plan::Plan plan = planner::lower(graph, rank, {});
    EXPECT_EQ(plan.header().world_size(), 2);
    std::map<std::string, plan::ParameterBlock> blocks;
    for (const plan::ParameterLoad& load : plan.parameters())
      blocks[load.initializer()] = load.block();
    EXPECT_EQ(blocks.at("w1").dim(), 0);
    EXPECT_EQ(blocks.at("w1").start(), 4 * rank);
    EXPECT_EQ(blocks.at("w1").size(), 4);
    EXPECT_EQ(blocks.at("w2").dim(), 1);
    EXPECT_EQ(blocks.at("w2").start(), 4 * rank);
    int all_reduces = 0;
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        if (!instruction.has_collective()) continue;
        ++all_reduces;
        const int group = instruction.collective().group();
        const auto found = std::find_if(plan.groups().begin(), plan.groups().end(),
                                        [&](const plan::CommGroup& g) { return g.id() == group; });
        ASSERT_NE(found, plan.groups().end());
        EXPECT_EQ(std::vector<int>(found->ranks().begin(), found->ranks().end()),
                  (std::vector<int>{0, 1}));
      }
    }
    EXPECT_EQ(all_reduces, 1);
  }
}

TEST(ShardDirective, ComposesWithDataParallelReplicasOfTheGroups) {
  ir::TaskGraph graph = two_layer_task_graph(2, R"({"type": "sgd"})");
  // Groups [0, 1] and [2, 3], replicated by their leaders (0 and 2).
  apply_directives(graph, R"([
      {"op": "shard", "devices": [[0, 1], [2, 3]], "params": {"w1": 0, "w2": 1}},
      {"op": "replicate", "devices": [0, 2]}])");
  EXPECT_EQ(graph.num_ranks(), 4);
  // The gradients of member 1's blocks meet those of the other group's member 1.
  const plan::Plan plan = planner::lower(graph, 3, {});
  std::set<std::vector<int>> groups;
  for (const plan::CommGroup& group : plan.groups()) {
    groups.insert(std::vector<int>(group.ranks().begin(), group.ranks().end()));
  }
  EXPECT_TRUE(groups.count({1, 3}));
  EXPECT_TRUE(groups.count({2, 3}));
  EXPECT_FALSE(groups.count({0, 2}));
}

void expect_refused(const std::string& directives, const std::string& message) {
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "sgd"})");
  try {
    apply_directives(graph, directives);
    ADD_FAILURE() << "planned " << directives;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
  }
}

TEST(ShardDirective, RefusesParamsThatDoNotSplit) {
  expect_refused(R"([{"op": "shard", "devices": [0, 1], "params": {"w9": 0}}])",
                 "\"w9\" matches no trained parameter");
  expect_refused(R"([{"op": "shard", "devices": [0, 1], "params": {"w*": 0, "w1": 0}}])",
                 "the parameter 'w1' matches both");
  expect_refused(R"([{"op": "shard", "devices": [0, 1], "params": {"w1": 2}}])",
                 "has no dimension 2");
  expect_refused(R"([{"op": "shard", "devices": [0, 1, 2], "params": {"w1": 0}}])",
                 "does not split along dimension 0 (8) over 3 devices");
}

// One graph per reshard: an op reading a tensor placed otherwise than it needs, which
// verify() must reject, and the same graph with the reshard, which it accepts.
std::string reshard_graph(const std::string& tensors, const std::string& ops) {
  std::string task = "task 0 compute F devices=[0] ops=[0";
  for (size_t op = 1; ops.find("op " + std::to_string(op) + " ") != std::string::npos; ++op) {
    task += "," + std::to_string(op);
  }
  return "shard_groups [0,1]\n" + tensors + ops + task + "]\n";
}

void expect_rejected(const std::string& text, const std::string& message) {
  const std::vector<std::string> errors = ir::verify(ir::parse(text));
  ASSERT_EQ(errors.size(), 1u) << text;
  EXPECT_NE(errors[0].find(message), std::string::npos) << errors[0];
}

void expect_accepted(const std::string& text) {
  EXPECT_EQ(ir::verify(ir::parse(text)), std::vector<std::string>{}) << text;
}

TEST(VerifyPlacements, APartialSumReadWholeNeedsAnAllReduce) {
  const std::string tensors = R"(
tensor a f32[4,4] input placement=S(1)
tensor b f32[4,4] parameter init=b placement=S(0)
tensor y f32[4,4] activation placement=P
tensor s f32[4,4] activation
tensor r f32[4,4] activation
)";
  expect_rejected(reshard_graph(tensors,
                                "op 0 MatMul \"mm\" (a, b) -> (y)\n"
                                "op 1 Relu \"relu\" (y) -> (r)\n"),
                  "reads 'y' placed P but needs it R");
  expect_accepted(reshard_graph(tensors,
                                "op 0 MatMul \"mm\" (a, b) -> (y)\n"
                                "op 1 piper.AllReduce \"ar\" (y) -> (s)\n"
                                "op 2 Relu \"relu\" (s) -> (r)\n"));
}

TEST(VerifyPlacements, ABlockReadWholeNeedsAnAllGather) {
  const std::string tensors = R"(
tensor x f32[2,8] input placement=S(0)
tensor w f32[4,8] activation
tensor y f32[4,8] activation
)";
  expect_rejected(reshard_graph(tensors, "op 0 Softmax \"softmax\" (x) -> (y) {axis=0}\n"),
                  "reads 'x' placed S(0) but needs it R");
  expect_accepted(reshard_graph(tensors,
                                "op 0 piper.AllGather \"ag\" (x) -> (w)\n"
                                "op 1 Softmax \"softmax\" (w) -> (y) {axis=0}\n"));
}

TEST(VerifyPlacements, APartialSumAddedToABlockNeedsAReduceScatter) {
  const std::string tensors = R"(
tensor x f32[2,8] input placement=S(0)
tensor p f32[4,8] input placement=P
tensor q f32[2,8] activation placement=S(0)
tensor y f32[2,8] activation placement=S(0)
)";
  expect_rejected(reshard_graph(tensors, "op 0 Add \"add\" (x, p) -> (y)\n"),
                  "reads 'p' placed P but needs it S(0)");
  expect_accepted(reshard_graph(tensors,
                                "op 0 piper.ReduceScatter \"rs\" (p) -> (q)\n"
                                "op 1 Add \"add\" (x, q) -> (y)\n"));
}

TEST(VerifyPlacements, AWholeTensorAddedToABlockNeedsASlice) {
  const std::string tensors = R"(
tensor x f32[2,8] input placement=S(0)
tensor c f32[4,8] input
tensor q f32[2,8] activation placement=S(0)
tensor y f32[2,8] activation placement=S(0)
)";
  expect_rejected(reshard_graph(tensors, "op 0 Add \"add\" (x, c) -> (y)\n"),
                  "reads 'c' placed R but needs it S(0)");
  expect_accepted(
      reshard_graph(tensors,
                    "op 0 piper.Shard \"slice\" (c) -> (q) {group=\"tensor\", num_shards=2}\n"
                    "op 1 Add \"add\" (x, q) -> (y)\n"));
}

TEST(VerifyPlacements, AnOutputPlacedOtherwiseThanItsOpGivesIsRejected) {
  expect_rejected(reshard_graph(R"(
tensor a f32[4,4] input placement=S(1)
tensor b f32[4,4] parameter init=b placement=S(0)
tensor y f32[4,4] activation
)",
                                "op 0 MatMul \"mm\" (a, b) -> (y)\n"),
                  "writes 'y' as P but it is placed R");
}

}  // namespace
}  // namespace piper
