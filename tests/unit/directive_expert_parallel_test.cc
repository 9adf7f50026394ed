#include <gtest/gtest.h>

#include <algorithm>

#include "directive_fixture.h"
#include "formats/error.h"
#include "planner/ir/text.h"
#include "planner/lower/lower.h"

namespace piper {
namespace {

// Tokens already dispatched to 2 experts with capacity 2, x [B, E, C, d], through two batched
// expert weights w1 [E, d, f] and w2 [E, f, h] with a ReLU between, then summed into class
// scores: GShard's expert layer.
ir::TaskGraph expert_task_graph(int64_t batch) {
  testing::OnnxBuilder b;
  b.input("x", {-1, 2, 2, 4}).input("y", {-1}, onnx::TensorProto::INT64).output("loss", {});
  b.initializer("w1", {2, 4, 5}, std::vector<float>(40, 0.1f));
  b.initializer("w2", {2, 5, 3}, std::vector<float>(30, 0.2f));
  testing::OnnxBuilder::attr(b.node("Einsum", {"x", "w1"}, {"h"}, "/experts/fc1"), "equation",
                             std::string("becd,edf->becf"));
  b.node("Relu", {"h"}, {"r"}, "/experts/relu");
  testing::OnnxBuilder::attr(b.node("Einsum", {"r", "w2"}, {"o"}, "/experts/fc2"), "equation",
                             std::string("becf,efh->bech"));
  testing::OnnxBuilder::attr(b.node("Einsum", {"o"}, {"z"}, "/combine"), "equation",
                             std::string("bech->bh"));
  b.node("SoftmaxCrossEntropyLoss", {"z", "y"}, {"loss"}, "/loss");
  ir::OpGraph graph = planner::import_model(b.model(), {.batch = batch}, "experts.onnx");
  const auto strategy = strategy::parse_strategy(
      R"({"batch": {"global": 8}, "optimizer": {"type": "sgd"}})", "test.json");
  planner::differentiate(graph);
  planner::add_optimizer(graph, strategy.optimizer);
  return ir::build_task_graph(std::move(graph));
}

// The directives as piper-plan applies them: shard first, its groups resolved.
void apply_planned(ir::TaskGraph& graph, const std::string& directives) {
  const auto strategy =
      planner::on_shard_groups(planner::expand_generators(strategy::parse_strategy(
          R"({"batch": {"global": 8}, "directives": )" + directives + "}", "test.json")));
  for (const auto& directive : strategy.directives) {
    const planner::DirectiveContext context{directive, strategy.source};
    planner::directive_pass(context)(graph, context);
    ir::verify_or_throw(graph, "after " + context.where());
  }
}

const char* kExpertParallel = R"([
    {"op": "replicate", "devices": [0, 1]},
    {"op": "shard", "devices": [0, 1], "params": {"w*": 0}}])";

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

int count(const ir::OpGraph& ops, const std::string& type, ir::Pass pass) {
  return static_cast<int>(std::count_if(ops.ops().begin(), ops.ops().end(), [&](const ir::Op& op) {
    return op.type == type && op.pass == pass;
  }));
}

TEST(ExpertParallel, TokensTravelToTheirExpertsAndBack) {
  ir::TaskGraph graph = expert_task_graph(4);
  apply_planned(graph, kExpertParallel);
  const std::string text = ir::print(graph);
  // Each replica keeps one expert; its rows of the batch stay its own.
  EXPECT_TRUE(has_line(text, "tensor w1 f32[1,4,5] parameter init=w1 placement=S(0)")) << text;
  EXPECT_TRUE(has_line(text, "tensor r f32[8,1,2,5] activation placement=S(1)")) << text;
  const ir::OpGraph& ops = graph.op_graph();
  EXPECT_EQ(ops.replica_group, 2);
  // Rows to experts before the experts, experts to rows after; the backward sends the scores'
  // gradient to the experts (w1's gradient reads the forward's exchange of x).
  EXPECT_EQ(count(ops, "piper.AllToAll", ir::Pass::kForward), 2) << text;
  EXPECT_EQ(count(ops, "piper.AllToAll", ir::Pass::kBackward), 1) << text;
  for (const char* reduction : {"piper.AllReduce", "piper.AllGather", "piper.ReduceScatter"}) {
    EXPECT_EQ(count(ops, reduction, ir::Pass::kForward), 0) << reduction;
    EXPECT_EQ(count(ops, reduction, ir::Pass::kBackward), 0) << reduction;
  }
  // The expert gradients are the replica's own blocks, in no data-parallel reduction.
  for (const ir::TrainedParameter& trained : ops.trained) {
    EXPECT_EQ(ops.tensor(trained.gradient).placement, ir::Placement::sharded(0));
    for (const ir::Task& task : graph.tasks()) {
      if (task.kind == ir::TaskKind::kCompute) continue;
      EXPECT_EQ(std::count(task.tensors.begin(), task.tensors.end(), trained.gradient), 0)
          << ir::to_string(task.kind);
    }
  }
}

TEST(ExpertParallel, LowersEachReplicasExpertsAndExchangesOverTheReplicas) {
  ir::TaskGraph graph = expert_task_graph(4);
  apply_planned(graph, kExpertParallel);
  for (int rank = 0; rank < 2; ++rank) {
    const plan::Plan plan = planner::lower(graph, rank, {});
    ASSERT_EQ(plan.parameters_size(), 2);
    for (const plan::ParameterLoad& load : plan.parameters()) {
      EXPECT_EQ(load.block().start(), rank) << load.initializer();
      EXPECT_EQ(load.block().size(), 1) << load.initializer();
    }
    int exchanges = 0;
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        if (!instruction.has_collective() ||
            instruction.collective().kind() != plan::Collective::ALL_TO_ALL) {
          continue;
        }
        ++exchanges;
        const auto group = std::find_if(
            plan.groups().begin(), plan.groups().end(),
            [&](const plan::CommGroup& g) { return g.id() == instruction.collective().group(); });
        ASSERT_NE(group, plan.groups().end());
        EXPECT_EQ(std::vector<int>(group->ranks().begin(), group->ranks().end()),
                  (std::vector<int>{0, 1}));
      }
    }
    EXPECT_EQ(exchanges, 3);
  }
}

TEST(ExpertParallel, RefusesAReplicateOverOtherGroups) {
  ir::TaskGraph graph = expert_task_graph(2);
  try {
    apply_planned(graph, R"([
        {"op": "replicate", "devices": [0, 1]},
        {"op": "replicate", "devices": [0, 1, 2, 3]},
        {"op": "shard", "devices": [0, 1], "params": {"w*": 0}}])");
    ADD_FAILURE() << "planned";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("splits parameters over the 2 replicas"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace piper
