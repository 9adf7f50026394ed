#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>

#include "planner/ir/task_graph.h"
#include "planner/ir/text.h"
#include "planner/ir/verify.h"

namespace piper::ir {
namespace {

// The task and edge lines of `graph`'s text form.
std::string task_lines(const TaskGraph& graph) {
  std::istringstream text(print(graph));
  std::string lines;
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("task ", 0) == 0 || line.rfind("edge ", 0) == 0) lines += line + "\n";
  }
  return lines;
}

TaskGraph build(const std::string& op_graph_text) {
  return build_task_graph(parse(op_graph_text).op_graph());
}

const std::string kTwoLayers = R"(
tensor x f32[4,8] input
tensor w1 f32[8,8] parameter
tensor w2 f32[8,8] parameter
tensor h f32[4,8] activation
tensor a f32[4,8] activation
tensor y f32[4,8] activation
tensor dy f32[4,8] activation
tensor da f32[4,8] activation
tensor dw1 f32[8,8] gradient
op 0 MatMul "/fc1/MatMul" (x, w1) -> (h) tags={LAYER:0}
op 1 Relu "/relu" (h) -> (a) tags={LAYER:0}
op 2 MatMul "/fc2/MatMul" (a, w2) -> (y) tags={LAYER:1}
op 3 piper.OnesLike "/loss_grad" (y) -> (dy) pass=B tags={LAYER:1}
op 4 piper.MatMulInputGrad "/fc2/MatMul_grad" (dy, w2) -> (da) pass=B tags={LAYER:1}
op 5 piper.ReluMatMulGrad "/fc1_grad" (da, h, x) -> (dw1) pass=B tags={LAYER:0}
)";

TEST(BuildTaskGraphTest, GroupsOpsByTagsAndPass) {
  const TaskGraph graph = build(kTwoLayers);
  EXPECT_EQ(task_lines(graph),
            "task 0 compute F mb=0 tags={LAYER:0} devices=[0] stream=compute ops=[0,1]\n"
            "task 1 compute F mb=0 tags={LAYER:1} devices=[0] stream=compute ops=[2]\n"
            "task 2 compute B mb=0 tags={LAYER:1} devices=[0] stream=compute ops=[3,4]\n"
            "task 3 compute B mb=0 tags={LAYER:0} devices=[0] stream=compute ops=[5]\n"
            "edge 0 -> 1 data\n"
            "edge 1 -> 2 data\n"
            "edge 2 -> 3 data\n"
            "edge 0 -> 3 data\n");
  EXPECT_EQ(verify(graph), std::vector<std::string>{});
}

TEST(BuildTaskGraphTest, GroupsOpsThatAreNotAdjacent) {
  // Ops 0 and 2 share a key, so they run in one task even with op 1 between them.
  const TaskGraph graph = build(R"(
tensor x f32[2] input
tensor a f32[2] activation
tensor b f32[2] activation
tensor c f32[2] activation
op 0 Relu "/a" (x) -> (a) tags={S:0}
op 1 Relu "/b" (x) -> (b) tags={S:1}
op 2 Relu "/c" (a) -> (c) tags={S:0}
)");
  EXPECT_EQ(task_lines(graph),
            "task 0 compute F mb=0 tags={S:0} devices=[0] stream=compute ops=[0,2]\n"
            "task 1 compute F mb=0 tags={S:1} devices=[0] stream=compute ops=[1]\n");
  EXPECT_EQ(verify(graph), std::vector<std::string>{});
}

TEST(BuildTaskGraphTest, RejectsCyclicGrouping) {
  // S:0 -> S:1 -> S:0: the two groups depend on each other.
  try {
    build(R"(
tensor x f32[2] input
tensor a f32[2] activation
tensor b f32[2] activation
tensor c f32[2] activation
op 0 Relu "/a" (x) -> (a) tags={S:0}
op 1 Relu "/b" (a) -> (b) tags={S:1}
op 2 Relu "/c" (b) -> (c) tags={S:0}
)");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cycle through task 0 (compute F mb=0 {S:0})"), std::string::npos)
        << message;
    EXPECT_NE(message.find("give ops between them the same tags"), std::string::npos) << message;
  }
}

TEST(TaskGraphTest, TopologicalOrderBreaksTiesById) {
  const TaskGraph graph = parse(R"(
task 0 compute F devices=[0]
task 1 compute F devices=[3]
task 2 compute F devices=[1]
task 3 compute F devices=[0]
edge 2 -> 0
edge 3 -> 1 temporal
)");
  EXPECT_EQ(graph.topological_order(), (std::vector<TaskId>{2, 0, 3, 1}));
  EXPECT_EQ(graph.world_size(), 4);
}

TEST(TaskGraphTest, TopologicalOrderNamesATaskOnACycle) {
  const TaskGraph graph = parse(R"(
task 0 compute F devices=[0]
task 1 compute B tags={LAYER:2} mb=1 devices=[0]
edge 0 -> 1
edge 1 -> 0 temporal
)");
  EXPECT_THROW(
      {
        try {
          graph.topological_order();
        } catch (const std::logic_error& error) {
          EXPECT_STREQ(error.what(), "the task DAG has a cycle through task 0 (compute F mb=0 {})");
          throw;
        }
      },
      std::logic_error);
}

TEST(TaskGraphTest, AddEdgeIgnoresDuplicates) {
  TaskGraph graph = parse("task 0 compute F\ntask 1 compute F\nedge 0 -> 1\nedge 0 -> 1\n");
  graph.add_edge(0, 1, EdgeKind::kTemporal);
  EXPECT_EQ(task_lines(graph),
            "task 0 compute F mb=0 tags={} devices=[] stream=compute\n"
            "task 1 compute F mb=0 tags={} devices=[] stream=compute\n"
            "edge 0 -> 1 data\n"
            "edge 0 -> 1 temporal\n");
}

TEST(TaskGraphTest, RemoveEdgesKeepsTheOthersInOrder) {
  TaskGraph graph = parse(
      "task 0 compute F\ntask 1 compute F\ntask 2 compute F\n"
      "edge 0 -> 1\nedge 0 -> 2 window\nedge 1 -> 2 temporal\n");
  graph.remove_edges({false, true, false});
  EXPECT_EQ(task_lines(graph),
            "task 0 compute F mb=0 tags={} devices=[] stream=compute\n"
            "task 1 compute F mb=0 tags={} devices=[] stream=compute\n"
            "task 2 compute F mb=0 tags={} devices=[] stream=compute\n"
            "edge 0 -> 1 data\n"
            "edge 1 -> 2 temporal\n");
}

TEST(TaskGraphTest, DescribeNamesKindPassMicrobatchAndTags) {
  const TaskGraph graph = parse("task 0 all_gather BW mb=7 tags={PP:1,LAYER:3} devices=[0,1]\n");
  EXPECT_EQ(graph.describe(0), "task 0 (all_gather BW mb=7 {LAYER:3,PP:1})");
}

}  // namespace
}  // namespace piper::ir
