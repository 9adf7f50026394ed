#include "planner/directives/backward_split.h"

#include <gtest/gtest.h>

#include "directive_fixture.h"

namespace piper {
namespace {

using testing::tasks_and_edges;
using testing::two_layer_task_graph;

TEST(CutTask, EveryPartReadsEarlierPartsThroughDataEdges) {
  // The backward task (ops 4-8) cut after op 4 and op 5: the last part's grad/w2 product
  // (op 6) reads the loss gradient that the first part writes, two parts back (edge 1 -> 4).
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "sgd"})");
  const std::vector<ir::TaskId> parts = planner::cut_task(graph, 1, {0, 1});
  EXPECT_EQ(parts, (std::vector<ir::TaskId>{1, 3, 4}));
  ir::verify_or_throw(graph, "after cut_task");
  EXPECT_EQ(tasks_and_edges(graph),
            R"(task 0 compute F mb=0 tags={} devices=[0] stream=compute ops=[0,1,2,3]
task 1 compute B mb=0 tags={} devices=[0] stream=compute ops=[4]
task 2 compute U mb=0 tags={} devices=[0] stream=compute ops=[9,10]
task 3 compute B mb=0 tags={} devices=[0] stream=compute ops=[5]
task 4 compute B mb=0 tags={} devices=[0] stream=compute ops=[6,7,8]
edge 0 -> 1 data
edge 1 -> 2 data
edge 1 -> 3 data
edge 1 -> 4 data
edge 3 -> 4 data
edge 0 -> 4 data
edge 4 -> 2 data
)");
}

TEST(CutTask, ADetachedTailHoldsBackOnlyWhatReadsIt) {
  // The backward task cut before its last op (grad/w1's product), an order's temporal edge out
  // of it: the edge leaves the part before the tail, the update still reads the tail's gradient.
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "sgd"})");
  graph.add_edge(1, 2, ir::EdgeKind::kTemporal);
  planner::cut_task(graph, 1, {3}, /*detached_tail=*/true);
  ir::verify_or_throw(graph, "after cut_task");
  EXPECT_EQ(tasks_and_edges(graph),
            R"(task 0 compute F mb=0 tags={} devices=[0] stream=compute ops=[0,1,2,3]
task 1 compute B mb=0 tags={} devices=[0] stream=compute ops=[4,5,6,7]
task 2 compute U mb=0 tags={} devices=[0] stream=compute ops=[9,10]
task 3 compute B mb=0 tags={} devices=[0] stream=compute ops=[8]
edge 0 -> 1 data
edge 1 -> 2 data
edge 1 -> 2 temporal
edge 1 -> 3 data
edge 3 -> 2 data
)");
}

}  // namespace
}  // namespace piper
