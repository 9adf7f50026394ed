// Pipelines on the task DAG: place across devices with transfers, order
// (with BI/BW splitting and its refusals), replicate per stage and the
// pipeline generator.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "directive_fixture.h"
#include "formats/error.h"
#include "planner/ir/verify.h"

namespace piper {
namespace {

using testing::apply_directives;
using testing::count_tasks;
using testing::two_stage_task_graph;

constexpr const char* kTwoStages = R"([
  {"op": "split", "dim_name": "MB", "num_microbatches": 2},
  {"op": "place", "filter": {"PP": 0}, "devices": [0]},
  {"op": "place", "filter": {"PP": 1}, "devices": [1]}])";

// "F0 F1 B0 B1": the compute tasks of `device` but the update, in DAG order.
std::string device_order(const ir::TaskGraph& graph, int device) {
  std::string text;
  for (ir::TaskId id : graph.topological_order()) {
    const ir::Task& task = graph.task(id);
    if (task.kind != ir::TaskKind::kCompute || task.pass == ir::Pass::kUpdate ||
        std::find(task.devices.begin(), task.devices.end(), device) == task.devices.end()) {
      continue;
    }
    text += (text.empty() ? "" : " ") + ir::to_string(task.pass) + std::to_string(task.microbatch);
  }
  return text;
}

std::string error_of(ir::TaskGraph& graph, const std::string& directives) {
  try {
    apply_directives(graph, directives);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(PlaceDirective, TransfersCarryWhatCrossesDevices) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, kTwoStages);
  // Per microbatch: the activation forward, its gradient backward, and the
  // loss to rank 0, which reports it.
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kSend), 3 * 2);
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kRecv), 3 * 2);
  for (const ir::Task& task : graph.tasks()) {
    if (task.kind == ir::TaskKind::kSend) {
      EXPECT_EQ(task.peer, 1 - task.devices.at(0));
      EXPECT_EQ(task.stream,
                "p2p_" + std::to_string(task.devices[0]) + "_to_" + std::to_string(task.peer));
    }
  }
}

TEST(PlaceDirective, PlacingAgainDerivesTheTransfersAnew) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, kTwoStages);
  apply_directives(graph, R"([{"op": "place", "filter": {"PP": 1}, "devices": [0]}])");
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kSend), 0);
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kRecv), 0);
}

TEST(OrderDirective, GroupsRunOneAfterAnother) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, kTwoStages);
  EXPECT_EQ(device_order(graph, 1), "F0 B0 F1 B1");  // ids: the clones of mb 1 come last
  apply_directives(graph, R"([{"op": "order", "device": 1, "filters": [
      [{"PP": 1, "MB": 0, "PASS": "F"}], [{"PP": 1, "MB": 1, "PASS": "F"}],
      [{"PP": 1, "MB": 0, "PASS": "B"}], [{"PP": 1, "MB": 1, "PASS": "B"}]]}])");
  EXPECT_EQ(device_order(graph, 1), "F0 F1 B0 B1");
}

TEST(OrderDirective, NamingBIAndBWSplitsTheBackward) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, kTwoStages);
  apply_directives(graph, R"([{"op": "order", "device": 1, "filters": [
      [{"PP": 1, "MB": 0, "PASS": "F"}], [{"PP": 1, "MB": 0, "PASS": "BI"}],
      [{"PP": 1, "MB": 1, "PASS": "F"}], [{"PP": 1, "MB": 1, "PASS": "BI"}],
      [{"PP": 1, "MB": 0, "PASS": "BW"}], [{"PP": 1, "MB": 1, "PASS": "BW"}]]}])");
  EXPECT_EQ(device_order(graph, 1), "F0 BI0 F1 BI1 BW0 BW1");
  const ir::OpGraph& ops = graph.op_graph();
  for (const ir::Task& task : graph.tasks()) {
    if (task.pass != ir::Pass::kBackwardWeight) continue;
    // The weight part makes w2's gradient and nothing earlier layers need.
    for (ir::OpId op : task.ops) {
      for (ir::TensorId out : ops.op(op).outputs) {
        EXPECT_NE(ops.tensor(out).name.find("grad/w2"), std::string::npos) << ops.tensor(out).name;
      }
    }
  }
  // Device 0 keeps its whole backward: the order named device 1 only.
  std::string device0 = device_order(graph, 0);
  std::sort(device0.begin(), device0.end());
  EXPECT_EQ(device0, "   0011BBFF");
}

TEST(OrderDirective, ContradictingDataflowIsRefused) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, kTwoStages);
  const std::string error = error_of(graph, R"([{"op": "order", "device": 1, "filters": [
      [{"PP": 1, "MB": 0, "PASS": "B"}], [{"PP": 1, "MB": 0, "PASS": "F"}]]}])");
  EXPECT_NE(error.find("$.directives[0].filters (order): on device 1 this order contradicts "
                       "dataflow: task"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("can never run"), std::string::npos) << error;
}

TEST(OrderDirective, DeadlockAcrossDevicesIsRefused) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, kTwoStages);
  apply_directives(graph, R"([{"op": "order", "device": 0, "filters": [
      [{"PP": 0, "MB": 0, "PASS": "F"}], [{"PP": 0, "MB": 0, "PASS": "B"}],
      [{"PP": 0, "MB": 1, "PASS": "F"}]]}])");
  // Alone this order is fine; with device 0's, F1 on device 1 waits for
  // device 0's F1, which waits for B0, which waits for device 1's B0.
  const std::string error = error_of(graph, R"([{"op": "order", "device": 1, "filters": [
      [{"PP": 1, "MB": 1, "PASS": "F"}], [{"PP": 1, "MB": 0, "PASS": "F"}],
      [{"PP": 1, "MB": 0, "PASS": "B"}]]}])");
  EXPECT_NE(error.find("on device 1 this order deadlocks with the orders of other devices: "
                       "task"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("compute F mb=1 {PP:1}) can never run"), std::string::npos) << error;
}

TEST(OrderDirective, OverridesTheWindowsOfZero) {
  // Two tasks per microbatch on one device set: ZeRO-2 and -3 read their
  // windows off the order F0 F0 B0 B0 F1 ..., which puts microbatch 0's
  // backward before microbatch 1's forward; a later order of every forward
  // first drops the windows it contradicts.
  for (const char* zero : {R"("shard_grads": true)", R"("shard_params": true)"}) {
    ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
    apply_directives(graph, std::string(R"([
        {"op": "split", "dim_name": "MB", "num_microbatches": 2},
        {"op": "replicate", "devices": [0, 1], )") +
                                zero + R"(},
        {"op": "order", "filters": [[{"MB": "*", "PASS": "F"}], [{"MB": "*", "PASS": "B"}]]}])");
    // Then the backwards, with ZeRO-2's accumulations (pass B too).
    const std::string order = device_order(graph, 0);
    EXPECT_EQ(order.substr(0, 12), "F0 F0 F1 F1 ") << zero;
    EXPECT_EQ(order.find('F', 12), std::string::npos) << order;
    ir::verify_or_throw(graph, zero);
  }
}

TEST(OrderDirective, AnEarlierOrderStands) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
      {"op": "order", "filters": [[{"MB": 1, "PASS": "F"}], [{"MB": 0, "PASS": "F"}]]}])");
  const std::string error = error_of(graph, R"([{"op": "order", "filters": [
      [{"MB": 0, "PASS": "F"}], [{"MB": 1, "PASS": "F"}]]}])");
  EXPECT_NE(error.find("on device 0 this order contradicts an earlier order of this device's "
                       "tasks: task"),
            std::string::npos)
      << error;
}

TEST(OrderDirective, WithoutADeviceTheGroupsMustShareOne) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, kTwoStages);
  const std::string error = error_of(graph, R"([{"op": "order", "filters": [
      [{"PP": 0, "MB": 0, "PASS": "F"}], [{"PP": 1, "MB": 0, "PASS": "F"}]]}])");
  EXPECT_NE(error.find("which run on different devices"), std::string::npos) << error;
}

TEST(ReplicateDirective, EachStageOverItsOwnReplicas) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, std::string(kTwoStages).substr(0, std::string(kTwoStages).size() - 1) +
                              R"(,
      {"op": "replicate", "filter": {"PP": 0}, "devices": [0, 2]},
      {"op": "replicate", "filter": {"PP": 1}, "devices": [1, 3]}])");
  // Replica i of a stage talks to replica i of the next: 0 <-> 1, 2 <-> 3.
  // The loss goes from 1 to 0 and from 3 to 2.
  for (const ir::Task& task : graph.tasks()) {
    if (task.kind == ir::TaskKind::kSend) {
      const int from = task.devices.at(0);
      EXPECT_EQ(from % 2, 1 - task.peer % 2);
      EXPECT_EQ(from / 2, task.peer / 2) << "send " << from << " -> " << task.peer;
    }
    if (task.kind == ir::TaskKind::kAllReduce) {
      const auto& devices = task.devices;
      EXPECT_TRUE(devices == std::vector<int>({0, 2}) || devices == std::vector<int>({1, 3}));
    }
  }
  // Per microbatch and pair of replicas: the activation, its gradient, and
  // the (replica-averaged) loss, which every rank reports.
  EXPECT_EQ(count_tasks(graph, ir::TaskKind::kSend), 2 * 2 * 3);
}

TEST(PipelineGenerator, ExpandsIntoSplitPlaceAndOneOrderPerDevice) {
  const auto strategy = planner::expand_generators(strategy::parse_strategy(
      R"({"batch": {"global": 8}, "directives": [{"op": "pipeline", "schedule": "1f1b",
          "devices": [3, 5], "num_microbatches": 3}]})",
      "test.json"));
  std::vector<std::string> ops;
  for (const auto& directive : strategy.directives) ops.push_back(directive.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"split", "place", "place", "order", "order"}));
  const auto& last = std::get<strategy::OrderDirective>(strategy.directives[4].spec);
  EXPECT_EQ(last.device, 5);
  std::string passes;
  for (const auto& group : last.filters) passes += *group.at(0).pass + " ";
  EXPECT_EQ(passes, "F B F B F B ");
  const auto& place = std::get<strategy::PlaceDirective>(strategy.directives[2].spec);
  EXPECT_EQ(place.devices, std::vector<int64_t>{5});
}

// The mesh form stands for what one writes by hand for DP x PP: the flat pipeline, then a
// replicate per stage over that stage's replicas at the pipeline's ZeRO stage.
TEST(PipelineGenerator, ReplicatesEachStageAsWrittenByHand) {
  const auto specs = [](const std::string& text) {
    std::vector<strategy::DirectiveSpec> result;
    for (const auto& d :
         planner::expand_generators(strategy::parse_strategy(text, "t.json")).directives) {
      result.push_back(d.spec);
    }
    return result;
  };
  const auto mesh = specs(R"({"batch": {"global": 8}, "mesh": [["dp", 2], ["pp", 2]],
      "directives": [{"op": "pipeline", "schedule": "1f1b", "axis": "pp",
                      "num_microbatches": 4, "zero": 2, "bucket_size": 4096}]})");
  const auto flat = specs(R"({"batch": {"global": 8}, "directives": [
      {"op": "pipeline", "schedule": "1f1b", "devices": [0, 1], "num_microbatches": 4},
      {"op": "replicate", "filter": {"PP": 0}, "devices": [0, 2], "shard_grads": true,
       "bucket_size": 4096},
      {"op": "replicate", "filter": {"PP": 1}, "devices": [1, 3], "shard_grads": true,
       "bucket_size": 4096}]})");
  EXPECT_EQ(mesh.size(), 7u);
  EXPECT_EQ(mesh, flat);
  // Interleaved: both chunks of a device share its replicas.
  const auto interleaved = specs(R"({"batch": {"global": 8}, "directives": [
      {"op": "pipeline", "schedule": "interleaved", "devices": [0, 1], "chunks": 2,
       "replicas": [[0, 2], [1, 3]], "num_microbatches": 2, "zero": 3}]})");
  ASSERT_EQ(interleaved.size(), 1u + 4 + 2 + 4);
  for (int64_t stage = 0; stage < 4; ++stage) {
    const auto& replicate = std::get<strategy::ReplicateDirective>(interleaved[7 + stage]);
    EXPECT_EQ(replicate.filter.tags.at("PP"), stage);
    EXPECT_EQ(replicate.devices,
              (stage % 2 == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{1, 3}));
    EXPECT_TRUE(replicate.shard_params);
  }
}

TEST(PipelineGenerator, OneFOneBOnTheDag) {
  ir::TaskGraph graph = two_stage_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, R"([{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1],
      "num_microbatches": 3}])");
  EXPECT_EQ(device_order(graph, 0), "F0 F1 B0 F2 B1 B2");
  EXPECT_EQ(device_order(graph, 1), "F0 B0 F1 B1 F2 B2");
}

}  // namespace
}  // namespace piper
