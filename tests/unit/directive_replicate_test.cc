#include <gtest/gtest.h>

#include "directive_fixture.h"
#include "formats/error.h"

namespace piper {
namespace {

using testing::apply_directives;
using testing::count_tasks;
using testing::two_layer_task_graph;

int64_t elements(const ir::OpGraph& ops, ir::TensorId id) {
  return ir::num_elements(ops.tensor(id).shape);
}

TEST(ReplicateDirective, ZeroZeroAllReducesGradientsInBucketsAndTheLoss) {
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "adamw"})");
  // w1 (128 B) and w2 (96 B) fit one 256-byte bucket, not one of 128.
  apply_directives(graph, R"([{"op": "place", "devices": [0, 1]},
      {"op": "replicate", "devices": [0, 1], "bucket_size": 256}])");
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kAllReduce), 2);  // loss + one bucket
  ir::TaskGraph small = two_layer_task_graph(4, R"({"type": "adamw"})");
  apply_directives(small, R"([{"op": "replicate", "devices": [0, 1], "bucket_size": 128}])");
  EXPECT_EQ(count_tasks(small, ir::TaskKind::kAllReduce), 3);
  for (const ir::Task& task : graph.tasks()) {
    EXPECT_EQ(task.devices, (std::vector<int>{0, 1}));
    if (task.kind == ir::TaskKind::kAllReduce) {
      EXPECT_EQ(task.stream, "dp_reduce");
      EXPECT_TRUE(task.average);
    }
  }
  EXPECT_EQ(graph.world_size(), 2);
}

TEST(ReplicateDirective, ZeroOneShardsOptimizerStateAndGathersParameters) {
  ir::TaskGraph graph = two_layer_task_graph(2, R"({"type": "adamw"})");
  apply_directives(graph, R"([{"op": "zero", "stage": 1, "devices": [0, 1, 2, 3]}])");
  const ir::OpGraph& ops = graph.op_graph();
  for (const ir::TrainedParameter& trained : ops.trained) {
    const int64_t n = elements(ops, trained.parameter);
    for (ir::TensorId state : trained.state) EXPECT_EQ(elements(ops, state), (n + 3) / 4);
    EXPECT_EQ(elements(ops, trained.gradient), n);  // gradients stay whole in ZeRO-1
  }
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kAllGather), 2);
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kReduceScatter), 0);
}

TEST(ReplicateDirective, ZeroTwoReduceScattersEveryMicrobatch) {
  ir::TaskGraph graph = two_layer_task_graph(1, R"({"type": "sgd", "momentum": 0.9})");
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
      {"op": "zero", "stage": 2, "devices": [0, 1, 2, 3]}])");
  const ir::OpGraph& ops = graph.op_graph();
  for (const ir::TrainedParameter& trained : ops.trained) {
    const int64_t n = elements(ops, trained.parameter);
    EXPECT_EQ(elements(ops, trained.gradient), (n + 3) / 4);
    EXPECT_TRUE(ops.tensor(trained.gradient).accumulated);
  }
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kReduceScatter), 2 * 2);  // params x microbatches
}

TEST(ReplicateDirective, ShardingParametersIsNotImplementedYet) {
  ir::TaskGraph graph = two_layer_task_graph(2, R"({"type": "sgd"})");
  EXPECT_THROW(apply_directives(graph, R"([{"op": "zero", "stage": 3, "devices": [0, 1]}])"),
               Error);
}

TEST(ReplicateDirective, OneDeviceOnlyPlaces) {
  ir::TaskGraph graph = two_layer_task_graph(8, R"({"type": "sgd"})");
  const int before = graph.num_tasks();
  apply_directives(graph, R"([{"op": "replicate", "devices": [0]}])");
  EXPECT_EQ(graph.num_tasks(), before);
}

}  // namespace
}  // namespace piper
