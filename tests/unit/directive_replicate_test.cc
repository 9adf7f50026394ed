#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "directive_fixture.h"
#include "formats/error.h"
#include "gemm_chain.h"
#include "planner/ir/text.h"
#include "planner/lower/lower.h"

namespace piper {
namespace {

using testing::apply_directives;
using testing::count_tasks;
using testing::tasks_and_edges;
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
      // The loss's off the gradients' stream.
      const bool loss = task.tensors == std::vector<ir::TensorId>{graph.op_graph().loss};
      EXPECT_EQ(task.stream, loss ? "dp_loss" : "dp_reduce");
      EXPECT_TRUE(task.average);
    }
  }
  EXPECT_EQ(graph.world_size(), 2);
}

TEST(ReplicateDirective, AllReducesABucketWhileTheRestOfTheBackwardRuns) {
  // One backward task (no per-layer tags) writes grad/w2 (op 6), then grad/w1 (op 8): with a
  // bucket each it is cut after op 6, and grad/w2's all-reduce waits for that part alone.
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "adamw"})");
  apply_directives(graph, R"([{"op": "replicate", "devices": [0, 1], "bucket_size": 128}])");
  EXPECT_EQ(tasks_and_edges(graph),
            R"(task 0 compute F mb=0 tags={} devices=[0,1] stream=compute ops=[0,1,2,3]
task 1 compute B mb=0 tags={} devices=[0,1] stream=compute ops=[4,5,6]
task 2 compute U mb=0 tags={} devices=[0,1] stream=compute ops=[9,10]
task 3 all_reduce F mb=0 tags={} devices=[0,1] stream=dp_loss tensors=[loss] average=1 background=1
task 4 compute B mb=0 tags={} devices=[0,1] stream=compute ops=[7,8]
task 5 all_reduce B mb=0 tags={} devices=[0,1] stream=dp_reduce tensors=[grad/w2] average=1 background=1
task 6 all_reduce B mb=0 tags={} devices=[0,1] stream=dp_reduce tensors=[grad/w1] average=1 background=1
edge 0 -> 1 data
edge 1 -> 2 data
edge 0 -> 3 data
edge 1 -> 4 data
edge 0 -> 4 data
edge 4 -> 2 data
edge 1 -> 5 data
edge 5 -> 2 data
edge 4 -> 6 data
edge 6 -> 2 data
)");
}

// The streams of rank `rank`'s plan, each with whether it is background.
std::map<std::string, bool> background_streams(const ir::TaskGraph& graph, int rank) {
  planner::LowerContext context;
  context.global_batch = 4;
  const plan::Plan plan = planner::lower(graph, rank, context);
  std::map<std::string, bool> streams;
  for (const plan::Stream& stream : plan.streams()) {
    streams[stream.name()] = stream.background();
  }
  return streams;
}

TEST(ReplicateDirective, GradientAndLossReductionsRunOnBackgroundStreams) {
  // Only the update reads what the reductions make: their streams are background, the
  // computation's is not.
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "adamw"})");
  apply_directives(graph, R"([{"op": "replicate", "devices": [0, 1]}])");
  const std::map<std::string, bool> expected = {
      {"compute", false}, {"dp_loss", true}, {"dp_reduce", true}};
  EXPECT_EQ(background_streams(graph, 1), expected);
  // A stream that also computes is not background.
  ir::TaskGraph inline_reductions = two_layer_task_graph(4, R"({"type": "adamw"})");
  apply_directives(inline_reductions,
                   R"([{"op": "replicate", "devices": [0, 1], "reduce_stream": "compute"}])");
  const std::map<std::string, bool> inline_expected = {{"compute", false}, {"dp_loss", true}};
  EXPECT_EQ(background_streams(inline_reductions, 0), inline_expected);
}

// The parts of the backward that each gradient bucket's all-reduce waits for, in plan order.
std::vector<ir::TaskId> bucket_producers(const ir::TaskGraph& graph) {
  std::vector<ir::TaskId> producers;
  for (const ir::Edge& edge : graph.edges()) {
    const ir::Task& to = graph.task(edge.to);
    if (to.kind == ir::TaskKind::kAllReduce && to.pass == ir::Pass::kBackward) {
      EXPECT_EQ(graph.task(edge.from).pass, ir::Pass::kBackward) << graph.describe(edge.from);
      producers.push_back(edge.from);
    }
  }
  return producers;
}

TEST(ReplicateDirective, DefaultBucketsCutAModelThatOneBucketWouldHoldIntoSeveral) {
  // Five 1 MiB weights, 5 MiB of gradients: DDP's 25 MiB buckets would make a 1 MiB first
  // bucket and a second that waits for the whole backward. Buckets of at most an eighth of the
  // gradients, but 1 MiB, hold one weight each, and the backward is cut after each but the last.
  const testing::GemmChain chain(std::vector<int64_t>(6, 512), /*input_bias=*/false);
  onnx::ModelProto model;
  std::ifstream file(chain.path(), std::ios::binary);
  ASSERT_TRUE(model.ParseFromIstream(&file));
  for (const std::string bucket_size : {"", R"(, "bucket_size": 2097152)"}) {
    ir::TaskGraph graph = testing::training_task_graph(model, 4, R"({"type": "sgd"})");
    apply_directives(graph, R"([{"op": "replicate", "devices": [0, 1])" + bucket_size + "}]");
    EXPECT_EQ(count_tasks(graph, ir::TaskKind::kAllReduce), 1 + 5) << bucket_size;
    const std::vector<ir::TaskId> producers = bucket_producers(graph);
    EXPECT_EQ(producers.size(), 5u);
    EXPECT_EQ(std::set<ir::TaskId>(producers.begin(), producers.end()).size(), 5u)
        << "each bucket waits for a part of the backward of its own";
  }
  // A bucket_size below the first bucket's 1 MiB still bounds every bucket.
  ir::TaskGraph graph = testing::training_task_graph(model, 4, R"({"type": "sgd"})");
  apply_directives(graph, R"([{"op": "replicate", "devices": [0, 1], "bucket_size": 1024}])");
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kAllReduce), 1 + 5);
}

TEST(ReplicateDirective, ZeroTwoScattersEachGradientAfterItsPartOfTheBackward) {
  // Five 1 MiB weights, no microbatches: the backward is cut as for five buckets, and the
  // scatters are queued on the reduce stream as their gradients become final (w4 first), so
  // that none waits behind one that needs the whole backward.
  const testing::GemmChain chain(std::vector<int64_t>(6, 512), /*input_bias=*/false);
  onnx::ModelProto model;
  std::ifstream file(chain.path(), std::ios::binary);
  ASSERT_TRUE(model.ParseFromIstream(&file));
  ir::TaskGraph graph = testing::training_task_graph(model, 4, R"({"type": "sgd"})");
  apply_directives(graph, R"([{"op": "zero", "stage": 2, "devices": [0, 1]}])");
  const ir::OpGraph& ops = graph.op_graph();
  std::vector<std::string> scattered;
  std::set<ir::TaskId> producers;
  for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
    if (graph.task(id).kind != ir::TaskKind::kReduceScatter) continue;
    scattered.push_back(ops.tensor(graph.task(id).tensors[0]).name);
    for (const ir::Edge& edge : graph.edges()) {
      if (edge.to == id) producers.insert(edge.from);
    }
  }
  EXPECT_EQ(scattered,
            (std::vector<std::string>{"grad/w4", "grad/w3", "grad/w2", "grad/w1", "grad/w0"}));
  EXPECT_EQ(producers.size(), 5u) << "each scatter waits for a part of the backward of its own";
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
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kAllGather), 1);  // w1 and w2 in one bucket
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
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kReduceScatter), 2);  // a bucket per microbatch
}

TEST(ReplicateDirective, ZeroTwoScattersABucketPerMicrobatchAndGathersABucket) {
  // The backward task of each microbatch makes grad/w2 and grad/w1 final together: one bucket,
  // one reduce-scatter per microbatch, and one task after it accumulating both slices (ops 12
  // and 11), the first before the second microbatch's backward begins (so the scatter is not
  // background, unlike the losses' all-reduces). One all-gather after the update rebuilds both
  // parameters, w1 first, as the forward reads them.
  ir::TaskGraph graph = two_layer_task_graph(1, R"({"type": "sgd", "momentum": 0.9})");
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
      {"op": "zero", "stage": 2, "devices": [0, 1]}])");
  EXPECT_EQ(tasks_and_edges(graph),
            R"(task 0 compute F mb=0 tags={} devices=[0,1] stream=compute ops=[0,1,2,3]
task 1 compute B mb=0 tags={} devices=[0,1] stream=compute ops=[4,5,6,7,8]
task 2 compute U mb=0 tags={} devices=[0,1] stream=compute ops=[13,9,14,10]
task 3 compute F mb=1 tags={} devices=[0,1] stream=compute ops=[0,1,2,3]
task 4 compute B mb=1 tags={} devices=[0,1] stream=compute ops=[4,5,6,7,8]
task 5 all_reduce F mb=0 tags={} devices=[0,1] stream=dp_loss tensors=[loss] average=1 background=1
task 6 all_reduce F mb=1 tags={} devices=[0,1] stream=dp_loss tensors=[loss] average=1 background=1
task 7 reduce_scatter B mb=0 tags={} devices=[0,1] stream=dp_reduce tensors=[grad/w2/microbatch,grad/w2/microbatch/shard,grad/w1/microbatch,grad/w1/microbatch/shard] average=1
task 8 compute B mb=0 tags={} devices=[0,1] stream=compute ops=[12,11]
task 9 reduce_scatter B mb=1 tags={} devices=[0,1] stream=dp_reduce tensors=[grad/w2/microbatch,grad/w2/microbatch/shard,grad/w1/microbatch,grad/w1/microbatch/shard] average=1
task 10 compute B mb=1 tags={} devices=[0,1] stream=compute ops=[12,11]
task 11 all_gather U mb=0 tags={} devices=[0,1] stream=dp_gather tensors=[w1/shard,w1,w2/shard,w2] average=1
edge 0 -> 1 data
edge 1 -> 2 data
edge 3 -> 4 data
edge 4 -> 2 data
edge 0 -> 5 data
edge 3 -> 6 data
edge 1 -> 7 data
edge 7 -> 8 data
edge 8 -> 4 window
edge 8 -> 2 data
edge 4 -> 9 data
edge 9 -> 10 data
edge 10 -> 2 data
edge 2 -> 11 data
)");
  // Buckets of 128 bytes hold w2 (96 B) and w1 (128 B) apart: two scatters per microbatch, two
  // accumulations, two gathers.
  ir::TaskGraph small = two_layer_task_graph(1, R"({"type": "sgd", "momentum": 0.9})");
  apply_directives(small, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
      {"op": "zero", "stage": 2, "devices": [0, 1], "bucket_size": 128}])");
  EXPECT_EQ(count_tasks(small, ir::TaskKind::kReduceScatter), 2 * 2);
  EXPECT_EQ(count_tasks(small, ir::TaskKind::kAllGather), 2);
  for (const ir::Task& task : small.tasks()) {
    if (task.kind == ir::TaskKind::kReduceScatter || task.kind == ir::TaskKind::kAllGather) {
      EXPECT_EQ(task.tensors.size(), 2u);  // one (input, output) pair
    }
  }
}

TEST(ReplicateDirective, ZeroThreeKeepsParameterSlicesAndGathersThemBeforeEveryUse) {
  ir::TaskGraph graph = two_layer_task_graph(2, R"({"type": "adamw"})");
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
      {"op": "zero", "stage": 3, "devices": [0, 1, 2]}])");
  const ir::OpGraph& ops = graph.op_graph();
  std::set<ir::TensorId> whole;
  for (const ir::TrainedParameter& trained : ops.trained) {
    const ir::Tensor& shard = ops.tensor(trained.parameter);
    ASSERT_GE(shard.shard_of, 0);
    whole.insert(shard.shard_of);
    EXPECT_EQ(shard.role, ir::Role::kParameter);
    EXPECT_EQ(shard.initializer, ops.tensor(shard.shard_of).initializer);
    const int64_t n = elements(ops, shard.shard_of);
    EXPECT_EQ(elements(ops, trained.parameter), (n + 2) / 3);
    EXPECT_EQ(elements(ops, trained.gradient), (n + 2) / 3);
  }
  for (const ir::Op& op : ops.ops()) {
    for (ir::TensorId input : op.inputs) {
      EXPECT_EQ(whole.count(input), 0u) << op.name << " still reads a whole parameter";
    }
  }
  // One gather before each forward and backward task of each microbatch, none after the update.
  std::vector<ir::TaskId> gathers;
  for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
    const ir::Task& task = graph.task(id);
    if (task.kind != ir::TaskKind::kAllGather) continue;
    gathers.push_back(id);
    EXPECT_NE(task.pass, ir::Pass::kUpdate);
    EXPECT_EQ(task.stream, "dp_gather");
    // (shard, gathered) pairs: forward reads w1 and w2, backward only w2 (x needs no gradient).
    EXPECT_EQ(task.tensors.size(), task.pass == ir::Pass::kForward ? 4u : 2u);
  }
  EXPECT_EQ(gathers.size(), 4u);
  // Prefetch is bounded: every gather but the first two waits for a compute task.
  int waiting = 0;
  for (ir::TaskId gather : gathers) {
    for (const ir::Edge& edge : graph.edges()) {
      waiting += edge.to == gather && graph.task(edge.from).kind == ir::TaskKind::kCompute;
    }
  }
  EXPECT_EQ(waiting, 2);
}

TEST(ReplicateDirective, ZeroThreeLowersEachRanksSliceOfEveryParameter) {
  ir::TaskGraph graph = two_layer_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, R"([{"op": "zero", "stage": 3, "devices": [0, 1, 2]}])");
  planner::LowerContext context;
  context.global_batch = 6;
  const plan::Plan plan = planner::lower(graph, 2, context);
  std::map<std::string, plan::ParameterShard> shards;
  for (const plan::ParameterLoad& load : plan.parameters())
    shards[load.initializer()] = load.shard();
  // w1 has 32 elements: slices of 11, the last holding 10 and a zero pad.
  EXPECT_EQ(shards["w1"].element_offset(), 22);
  EXPECT_EQ(shards["w1"].element_count(), 10);
  EXPECT_EQ(shards["w1"].elements(), 32);
  EXPECT_EQ(shards["w2"].element_offset(), 16);
  EXPECT_EQ(shards["w2"].element_count(), 8);
  EXPECT_EQ(plan.memory().parameter_bytes(), (11 + 8) * 4u);
  int gathered = 0;
  for (const plan::Tensor& tensor : plan.tensors()) {
    if (tensor.name().find("/gathered/") == std::string::npos) continue;
    ++gathered;
    EXPECT_EQ(tensor.role(), plan::ACTIVATION) << tensor.name();
  }
  EXPECT_EQ(gathered, 3);  // w1 and w2 for forward, w2 for backward
}

TEST(ReplicateDirective, OneDeviceOnlyPlaces) {
  ir::TaskGraph graph = two_layer_task_graph(8, R"({"type": "sgd"})");
  const int before = graph.num_tasks();
  apply_directives(graph, R"([{"op": "replicate", "devices": [0]}])");
  EXPECT_EQ(graph.num_tasks(), before);
}

}  // namespace
}  // namespace piper
