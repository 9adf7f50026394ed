// The step simulation on hand-built task DAGs with uniform task times (serial
// streams, transfers that overlap their recv, collectives that start
// together, replicas), on a planned data-parallel step whose gradient
// all-reduces overlap the backward, and on a tensor-parallel one's reshards.
#include "planner/sim/step_simulation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "formats/error.h"
#include "formats/schedule_view.h"
#include "formats/strategy.h"
#include "planner/plan_model.h"
#include "planner/sim/overlapped_pairs.h"

namespace piper::planner::sim {
namespace {

class Dag {
 public:
  ir::TaskId compute(int device, ir::Pass pass, int microbatch, std::string stream = "compute") {
    ir::Task task;
    task.pass = pass;
    task.microbatch = microbatch;
    task.devices = {device};
    task.stream = std::move(stream);
    return graph.add_task(std::move(task));
  }
  ir::TaskId comm(ir::TaskKind kind, std::vector<int> devices, int peer, int microbatch,
                  std::string stream) {
    ir::Task task;
    task.kind = kind;
    task.microbatch = microbatch;
    task.devices = std::move(devices);
    task.peer = peer;
    task.stream = std::move(stream);
    return graph.add_task(std::move(task));
  }
  // A send on `from` and its recv on `to`, after `producer`; returns the recv.
  ir::TaskId transfer(ir::TaskId producer, int from, int to, int microbatch) {
    const ir::TaskId send = comm(ir::TaskKind::kSend, {from}, to, microbatch, "send");
    const ir::TaskId recv = comm(ir::TaskKind::kRecv, {to}, from, microbatch, "recv");
    edge(producer, send);
    edge(send, recv);
    return recv;
  }
  void edge(ir::TaskId from, ir::TaskId to, ir::EdgeKind kind = ir::EdgeKind::kData) {
    graph.add_edge(from, to, kind);
  }

  ir::TaskGraph graph{ir::OpGraph{}};
};

const TaskSpan& span_of(const StepSimulation& sim, int device, ir::TaskId task) {
  for (const TaskSpan& span : sim.devices.at(device).tasks) {
    if (span.task == task) return span;
  }
  throw std::logic_error("task " + std::to_string(task) + " is not on device " +
                         std::to_string(device));
}

TEST(StepSimulation, TwoStagesWithSendRecvAndUniformCosts) {
  // Device 0 computes F0 and F1 and sends each to device 1, which computes them:
  // every task, transfers included, takes 1.
  Dag dag;
  const ir::TaskId f0 = dag.compute(0, ir::Pass::kForward, 0);
  const ir::TaskId f1 = dag.compute(0, ir::Pass::kForward, 1);
  dag.edge(f0, f1, ir::EdgeKind::kTemporal);
  const ir::TaskId r0 = dag.transfer(f0, 0, 1, 0);
  const ir::TaskId r1 = dag.transfer(f1, 0, 1, 1);
  const ir::TaskId g0 = dag.compute(1, ir::Pass::kForward, 0);
  const ir::TaskId g1 = dag.compute(1, ir::Pass::kForward, 1);
  dag.edge(r0, g0);
  dag.edge(r1, g1);
  dag.edge(g0, g1, ir::EdgeKind::kTemporal);

  const StepSimulation sim = simulate(dag.graph, [](ir::TaskId) { return 1.0; });
  // F0 [0,1], F1 [1,2]; sends [1,2], [2,3]; each recv overlaps its send; G0 [2,3], G1 [3,4].
  EXPECT_DOUBLE_EQ(sim.step, 4);
  EXPECT_DOUBLE_EQ(span_of(sim, 1, r0).start, 1);
  EXPECT_DOUBLE_EQ(span_of(sim, 1, r0).end, 2);
  EXPECT_DOUBLE_EQ(span_of(sim, 1, r1).end, 3);
  EXPECT_DOUBLE_EQ(span_of(sim, 1, g0).start, 2);
  EXPECT_DOUBLE_EQ(span_of(sim, 1, g1).end, 4);
  ASSERT_EQ(sim.devices.size(), 2u);
  for (const DeviceTimeline& device : sim.devices) {
    EXPECT_DOUBLE_EQ(device.busy, 2);
    EXPECT_DOUBLE_EQ(device.bubble_fraction, 0.5);
  }
  EXPECT_EQ(sim.devices[0].tasks.size(), 4u);  // F0, F1 and two sends
}

TEST(StepSimulation, GPipeBubbleWithFreeTransfers) {
  // p = 2 stages, m = 4 microbatches, F = B = 1, transfers free: every
  // device idles (p-1)/(m+p-1) of the step.
  constexpr int kStages = 2, kMicrobatches = 4;
  Dag dag;
  std::vector<std::vector<ir::TaskId>> forward(kStages), backward(kStages);
  std::vector<ir::TaskId> last(kStages, -1);
  const auto in_order = [&](int stage, ir::TaskId task) {
    if (last[stage] >= 0) dag.edge(last[stage], task, ir::EdgeKind::kTemporal);
    last[stage] = task;
  };
  for (int s = 0; s < kStages; ++s) {
    for (int m = 0; m < kMicrobatches; ++m) {
      forward[s].push_back(dag.compute(s, ir::Pass::kForward, m));
      in_order(s, forward[s].back());
      if (s > 0) dag.edge(dag.transfer(forward[s - 1][m], s - 1, s, m), forward[s][m]);
    }
  }
  for (int s = kStages - 1; s >= 0; --s) {
    for (int m = 0; m < kMicrobatches; ++m) {
      backward[s].push_back(dag.compute(s, ir::Pass::kBackward, m));
      in_order(s, backward[s].back());
      dag.edge(forward[s][m], backward[s][m]);
      if (s + 1 < kStages) dag.edge(dag.transfer(backward[s + 1][m], s + 1, s, m), backward[s][m]);
    }
  }
  const StepSimulation sim = simulate(dag.graph, [&](ir::TaskId id) {
    return dag.graph.task(id).kind == ir::TaskKind::kCompute ? 1.0 : 0.0;
  });
  EXPECT_DOUBLE_EQ(sim.step, 2 * (kMicrobatches + kStages - 1));
  for (const DeviceTimeline& device : sim.devices) {
    EXPECT_DOUBLE_EQ(device.busy, 2 * kMicrobatches);
    EXPECT_DOUBLE_EQ(device.bubble_fraction, (kStages - 1.0) / (kMicrobatches + kStages - 1.0));
  }
}

TEST(StepSimulation, CollectivesStartTogetherAndReplicasRunApart) {
  Dag dag;
  const ir::TaskId short_work = dag.compute(0, ir::Pass::kBackward, 0);
  const ir::TaskId long_work = dag.compute(1, ir::Pass::kBackward, 0);
  const ir::TaskId reduce = dag.comm(ir::TaskKind::kAllReduce, {0, 1}, -1, 0, "reduce");
  dag.edge(short_work, reduce);
  dag.edge(long_work, reduce);
  ir::Task update;
  update.pass = ir::Pass::kUpdate;
  update.devices = {0, 1};
  const ir::TaskId replicated = dag.graph.add_task(update);
  dag.edge(reduce, replicated);
  const StepSimulation sim =
      simulate(dag.graph, [&](ir::TaskId id) { return id == long_work ? 3.0 : 1.0; });
  EXPECT_DOUBLE_EQ(span_of(sim, 0, reduce).start, 3);  // waits for device 1
  EXPECT_DOUBLE_EQ(span_of(sim, 1, reduce).end, 4);
  EXPECT_DOUBLE_EQ(span_of(sim, 0, replicated).start, 4);
  EXPECT_DOUBLE_EQ(span_of(sim, 1, replicated).end, 5);
  EXPECT_DOUBLE_EQ(sim.step, 5);
  EXPECT_DOUBLE_EQ(sim.devices[0].busy, 2);
  EXPECT_DOUBLE_EQ(sim.devices[1].busy, 4);
}

TEST(StepSimulation, ComputeOnTwoStreamsCountsOverlapOnce) {
  Dag dag;
  dag.compute(0, ir::Pass::kForward, 0, "compute");
  dag.compute(0, ir::Pass::kBackward, 1, "compute2");
  const StepSimulation sim = simulate(dag.graph, [](ir::TaskId id) { return id == 0 ? 2.0 : 1.0; });
  EXPECT_DOUBLE_EQ(sim.step, 2);
  EXPECT_DOUBLE_EQ(sim.devices[0].busy, 2);
  EXPECT_DOUBLE_EQ(sim.devices[0].bubble_fraction, 0);
}

// An order group of two on device 0 (its forward of microbatch 1 on compute, its backward of
// microbatch 0 on compute2, between two singleton groups): the pair waits for its later
// member's input, then both take the pair's time together.
TEST(StepSimulation, OverlappedPairStartsTogetherAndTakesThePairsTime) {
  Dag dag;
  const ir::TaskId before = dag.compute(0, ir::Pass::kForward, 0);
  const ir::TaskId forward = dag.compute(0, ir::Pass::kForward, 1, "compute");
  const ir::TaskId backward = dag.compute(0, ir::Pass::kBackward, 0, "compute2");
  const ir::TaskId after = dag.compute(0, ir::Pass::kForward, 2);
  const ir::TaskId upstream = dag.compute(1, ir::Pass::kBackward, 0);
  dag.edge(dag.transfer(upstream, 1, 0, 0), backward);
  for (ir::TaskId member : {forward, backward}) {
    dag.edge(before, member, ir::EdgeKind::kTemporal);
    dag.edge(member, after, ir::EdgeKind::kTemporal);
  }
  const auto seconds = [&](ir::TaskId id) {
    if (id == upstream) return 3.0;
    return dag.graph.task(id).kind == ir::TaskKind::kCompute ? 1.0 : 0.0;
  };
  const StepSimulation sim =
      simulate(dag.graph, seconds, [](ir::TaskId, ir::TaskId) { return 1.5; });
  for (ir::TaskId member : {forward, backward}) {
    EXPECT_DOUBLE_EQ(span_of(sim, 0, member).start, 3);  // the backward's input arrives at 3
    EXPECT_DOUBLE_EQ(span_of(sim, 0, member).end, 4.5);
  }
  EXPECT_DOUBLE_EQ(span_of(sim, 0, after).start, 4.5);
  EXPECT_DOUBLE_EQ(sim.devices[0].busy, 1 + 1.5 + 1);
  // Without a pair duration the pair takes the sum of its members' times.
  EXPECT_DOUBLE_EQ(span_of(simulate(dag.graph, seconds), 0, after).start, 5);
}

// ZeRO-2 on the pair's devices: the backward's gradient bucket is reduce-scattered over the
// replicas, then accumulated by a task of the backward's pass, microbatch and stream that the
// order group binds as well. It follows the backward, so the pair is still the forward and the
// backward; the accumulation runs after the reduce-scatter, outside the pair's time.
TEST(StepSimulation, AnOverlappedPairLeavesItsBucketAccumulationsOut) {
  Dag dag;
  const ir::TaskId before = dag.compute(0, ir::Pass::kForward, 0);
  const ir::TaskId forward = dag.compute(0, ir::Pass::kForward, 1, "compute");
  const ir::TaskId backward = dag.compute(0, ir::Pass::kBackward, 0, "compute2");
  const ir::TaskId accumulate = dag.compute(0, ir::Pass::kBackward, 0, "compute2");
  const ir::TaskId after = dag.compute(0, ir::Pass::kForward, 2);
  const ir::TaskId scatter = dag.comm(ir::TaskKind::kReduceScatter, {0}, -1, 0, "dp_reduce");
  dag.edge(backward, scatter);
  dag.edge(scatter, accumulate);
  for (ir::TaskId member : {forward, backward, accumulate}) {
    dag.edge(before, member, ir::EdgeKind::kTemporal);
    dag.edge(member, after, ir::EdgeKind::kTemporal);
  }
  const std::vector<OverlappedPair> pairs = overlapped_pairs(dag.graph);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].first, forward);
  EXPECT_EQ(pairs[0].second, backward);
  const StepSimulation sim = simulate(
      dag.graph, [](ir::TaskId) { return 1.0; }, [](ir::TaskId, ir::TaskId) { return 1.5; });
  EXPECT_DOUBLE_EQ(span_of(sim, 0, forward).start, 1);
  EXPECT_DOUBLE_EQ(span_of(sim, 0, backward).end, 2.5);
  EXPECT_DOUBLE_EQ(span_of(sim, 0, accumulate).start, 3.5);  // after the reduce-scatter
  EXPECT_DOUBLE_EQ(span_of(sim, 0, after).start, 4.5);
  // An accumulation that did not follow the backward would leave no pair to tell.
  Dag loose;
  const ir::TaskId first = loose.compute(0, ir::Pass::kForward, 0);
  for (const char* stream : {"compute", "compute2", "compute2"}) {
    loose.edge(first, loose.compute(0, ir::Pass::kBackward, 0, stream), ir::EdgeKind::kTemporal);
  }
  EXPECT_TRUE(overlapped_pairs(loose.graph).empty());
}

// Devices of one node that share their compute: a task takes its time alone while the node's
// other devices idle, its time together while all of them compute, and in between in proportion
// to how many do. Device 0's task (10 s together, 5 s alone) shares the node with device 1's
// (4 s either way) for 4 s, doing 0.4 of its work, then does the rest alone in 3 s.
TEST(StepSimulation, AComputeTaskRunsFasterWhileTheRestOfItsNodeIdles) {
  Dag dag;
  const ir::TaskId slow = dag.compute(0, ir::Pass::kForward, 0);
  const ir::TaskId short_one = dag.compute(1, ir::Pass::kForward, 0);
  const ir::TaskId third = dag.compute(2, ir::Pass::kForward, 0);
  const auto together = [&](ir::TaskId id) { return id == slow ? 10.0 : id == third ? 2.0 : 4.0; };
  const auto alone = [&](ir::TaskId id) { return id == slow ? 5.0 : id == third ? 2.0 : 4.0; };
  const auto sum = [&](ir::TaskId a, ir::TaskId b) { return together(a) + together(b); };
  const auto sum_alone = [&](ir::TaskId a, ir::TaskId b) { return alone(a) + alone(b); };
  // Devices 0 and 1 on one node, device 2 on the next.
  StepSimulation sim = simulate(dag.graph, together, sum, {2, alone, sum_alone});
  EXPECT_DOUBLE_EQ(span_of(sim, 0, slow).end, 7);
  EXPECT_DOUBLE_EQ(span_of(sim, 1, short_one).end, 4);
  EXPECT_DOUBLE_EQ(span_of(sim, 2, third).end, 2);
  EXPECT_DOUBLE_EQ(sim.step, 7);
  // A node of its own each: alone throughout.
  sim = simulate(dag.graph, together, sum, {1, alone, sum_alone});
  EXPECT_DOUBLE_EQ(span_of(sim, 0, slow).end, 5);
  // All three on one node (device 2's task 2 s): 2 s with both others computing (0.2 of the
  // work), 2 s with one of two, half way between (7.5 s a task: 2 / 7.5 of it), the rest alone.
  sim = simulate(dag.graph, together, sum, {0, alone, sum_alone});
  EXPECT_NEAR(span_of(sim, 0, slow).end, 4 + (1 - 0.2 - 2 / 7.5) * 5, 1e-9);
}

// Contention is a fixed point: a task's time depends on when the others compute, theirs on when
// it ends. Device 1's second task waits for device 0's first: while device 0 runs alone its task
// is faster, so device 1's second starts earlier, and overlaps device 0's second.
TEST(StepSimulation, SharedComputeSettlesTheTimesOfTasksThatWaitForEachOther) {
  Dag dag;
  const ir::TaskId first = dag.compute(0, ir::Pass::kForward, 0);
  const ir::TaskId second = dag.compute(0, ir::Pass::kForward, 1);
  const ir::TaskId downstream = dag.compute(1, ir::Pass::kForward, 0);
  dag.edge(first, second);
  dag.edge(dag.transfer(first, 0, 1, 0), downstream);
  const auto together = [&](ir::TaskId id) {
    return dag.graph.task(id).kind == ir::TaskKind::kCompute ? 2.0 : 0.0;
  };
  const auto alone = [&](ir::TaskId id) {
    return dag.graph.task(id).kind == ir::TaskKind::kCompute ? 1.0 : 0.0;
  };
  const StepSimulation sim =
      simulate(dag.graph, together, [](ir::TaskId, ir::TaskId) { return 0.0; },
               {2, alone, [](ir::TaskId, ir::TaskId) { return 0.0; }});
  // The first alone (1 s), then the second and the downstream one together (2 s); the passes
  // stop within 1% of that (a single pass through the one before would end them at 2 and 3,
  // then 3 and 2.5, swinging).
  EXPECT_DOUBLE_EQ(span_of(sim, 0, first).end, 1);
  EXPECT_DOUBLE_EQ(span_of(sim, 1, downstream).start, 1);
  EXPECT_NEAR(span_of(sim, 0, second).end, 3, 0.03);
  EXPECT_NEAR(span_of(sim, 1, downstream).end, 3, 0.03);
}

TEST(StepSimulation, RejectsCyclesAndBadDurations) {
  Dag dag;
  const ir::TaskId a = dag.compute(0, ir::Pass::kForward, 0);
  const ir::TaskId b = dag.compute(0, ir::Pass::kForward, 1);
  dag.edge(a, b);
  EXPECT_THROW(simulate(dag.graph, [](ir::TaskId) { return -1.0; }), Error);
  dag.edge(b, a, ir::EdgeKind::kTemporal);
  try {
    simulate(dag.graph, [](ir::TaskId) { return 1.0; });
    FAIL() << "a cyclic DAG simulated";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cannot simulate"), std::string::npos) << error.what();
  }
}

TEST(StepSimulation, DataParallelAllReduceOverlapsTheBackward) {
  // samples/mlp, one task per layer and pass, on 2 replicas; each layer's
  // gradients all-reduced in their own bucket while earlier layers' backward runs.
  const strategy::Strategy strategy = strategy::parse_strategy(R"({
    "batch": {"global": 32},
    "optimizer": {"type": "sgd", "lr": 0.1},
    "annotations": [{"match": "/fc1/*", "tags": {"LAYER": 0}},
                    {"match": "/fc2/*", "tags": {"LAYER": 1}},
                    {"match": "/fc3/*", "tags": {"LAYER": 2}}],
    "directives": [{"op": "replicate", "devices": [0, 1], "bucket_size": 64}]
  })",
                                                               "dp.json");
  const PlanningResult result =
      plan_model(PIPER_SOURCE_DIR "/samples/mlp/model.onnx", strategy, {});
  ASSERT_EQ(result.plans.size(), 2u);
  for (const plan::Plan& plan : result.plans) {
    const plan::PlannedStep& step = plan.planned_step();
    EXPECT_GT(step.step_s(), 0);
    EXPECT_DOUBLE_EQ(step.step_s(), result.plans[0].planned_step().step_s());
    // Replicas compute alike: the same planned FLOPs.
    EXPECT_GT(step.flops(), 0);
    EXPECT_DOUBLE_EQ(step.flops(), result.plans[0].planned_step().flops());
    EXPECT_GT(step.bubble_fraction(), 0);
    EXPECT_LT(step.bubble_fraction(), 1);
    // The gradient norm's all-reduce of one float waits for every gradient, on the compute
    // stream: nothing is left to overlap it.
    std::set<int> norm_tasks;
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        if (instruction.has_collective() &&
            plan.tensors(instruction.collective().inputs(0)).name() == "grad_norm/sum_squares") {
          norm_tasks.insert(instruction.task());
        }
      }
    }
    EXPECT_EQ(norm_tasks.size(), 1u);
    int reduces = 0;
    bool overlaps = false;
    for (const plan::PlannedTask& reduce : plan.planned_tasks()) {
      if (reduce.kind() != "all_reduce" || norm_tasks.count(reduce.task())) continue;
      ++reduces;
      EXPECT_NE(reduce.stream(), "compute");
      for (const plan::PlannedTask& work : plan.planned_tasks()) {
        overlaps |= work.kind() == "compute" && work.start_s() < reduce.end_s() &&
                    reduce.start_s() < work.end_s();
      }
    }
    EXPECT_GE(reduces, 3);  // a bucket per layer, and the loss
    EXPECT_TRUE(overlaps) << "no all-reduce of rank " << plan.header().rank()
                          << " overlaps a compute task";
    for (int i = 1; i < plan.planned_tasks_size(); ++i) {
      EXPECT_LE(plan.planned_tasks(i - 1).start_s(), plan.planned_tasks(i).start_s());
    }
  }
}

// A profile taken by two ranks of one machine (every kernel, through the curves of piper.MatMul
// and Add, twice as fast alone): a two-stage pipeline is planned with each task between its
// time alone and together, some tasks of each stage alone (stage 0's first forward: stage 1
// waits for it), and the step shorter than without the times alone.
TEST(StepSimulation, PlansEachPipelineStageFasterWhereTheOtherWaits) {
  const strategy::Strategy strategy = strategy::parse_strategy(R"({
    "batch": {"global": 32},
    "optimizer": {"type": "sgd", "lr": 0.1},
    "annotations": [{"match": "/fc1/*", "tags": {"PP": 0}},
                    {"match": "/fc[23]/*", "tags": {"PP": 1}}],
    "directives": [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1],
                    "num_microbatches": 4}]
  })",
                                                               "pp.json");
  PlanningOptions options;
  options.rates.devices_per_node = 2;
  options.rates.measured.kernels = {
      {"piper.MatMul", "float32", formats::CostKey::kFlops, {{{1e3, 1e-5}, {1e9, 1e-2}}}, {}},
      {"Add", "float32", formats::CostKey::kBytes, {{{1e2, 1e-5}, {1e8, 1e-2}}}, {}}};
  const auto together =
      plan_model(PIPER_SOURCE_DIR "/samples/mlp/model.onnx", strategy, options).plans;
  for (formats::MeasuredKernel& kernel : options.rates.measured.kernels) {
    kernel.alone = {kernel.curve.points[0].second / 2, kernel.curve.points[1].second / 2};
  }
  const auto shared =
      plan_model(PIPER_SOURCE_DIR "/samples/mlp/model.onnx", strategy, options).plans;
  ASSERT_EQ(shared.size(), 2u);
  for (size_t rank = 0; rank < 2; ++rank) {
    const plan::Plan& plan = shared[rank];
    EXPECT_LT(plan.planned_step().step_s(), together[rank].planned_step().step_s());
    std::vector<double> ratios;  // of each compute task's planned time to its time together
    for (int i = 0; i < plan.planned_tasks_size(); ++i) {
      const plan::PlannedTask& task = plan.planned_tasks(i);
      const plan::PlannedTask& alike = together[rank].planned_tasks(i);
      ASSERT_EQ(task.task(), alike.task());
      if (task.kind() != "compute") continue;
      ratios.push_back((task.end_s() - task.start_s()) / (alike.end_s() - alike.start_s()));
      EXPECT_GE(ratios.back(), 0.5 - 1e-9) << "rank " << rank << " task " << task.task();
      EXPECT_LE(ratios.back(), 1 + 1e-9) << "rank " << rank << " task " << task.task();
    }
    EXPECT_TRUE(std::any_of(ratios.begin(), ratios.end(),
                            [](double ratio) { return std::abs(ratio - 0.5) < 1e-6; }))
        << "no task of rank " << rank << " runs alone";
    if (rank == 0) {
      EXPECT_NEAR(ratios.front(), 0.5, 1e-6);  // the first forward
    }
  }
}

// Tensor parallelism: each reshard inside a compute task (an inline all-reduce of the Megatron
// split) appears in the planned step as an entry of its own, on the task's stream, within
// the task's span, so piper-dump --schedule draws it there.
TEST(StepSimulation, PlansTensorParallelReshardsOnTheirTasksStream) {
  const strategy::Strategy strategy = strategy::parse_strategy(
      R"({"batch": {"global": 4}, "frozen": ["*mask*"], "mesh": [["tp", 2]],
          "directives": [{"op": "shard", "axis": "tp", "params": {
            "blocks.*.attn.q.*": 0, "blocks.*.attn.k.weight": 0, "blocks.*.attn.v.*": 0,
            "blocks.*.attn.proj.weight": 1, "blocks.*.mlp.fc.*": 0,
            "blocks.*.mlp.out.weight": 1}}]})",
      "tp2.json");
  const auto plans =
      planner::plan_model(PIPER_SOURCE_DIR "/samples/gpt/model.onnx", strategy, {}).plans;
  ASSERT_EQ(plans.size(), 2u);
  for (const plan::Plan& plan : plans) {
    std::set<int> computing;
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        if (instruction.has_kernel()) computing.insert(instruction.task());
      }
    }
    std::map<std::pair<std::string, int>, int> inline_collectives;  // (stream, task) -> count
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        if (instruction.has_collective() && computing.count(instruction.task())) {
          ++inline_collectives[{stream.name(), instruction.task()}];
        }
      }
    }
    ASSERT_FALSE(inline_collectives.empty());
    std::map<std::pair<std::string, int>, int> planned;
    for (const plan::PlannedTask& entry : plan.planned_tasks()) {
      if (entry.kind() == "compute" || !computing.count(entry.task())) continue;
      EXPECT_EQ(entry.label(), "AR");
      ++planned[{entry.stream(), entry.task()}];
      const auto task = std::find_if(plan.planned_tasks().begin(), plan.planned_tasks().end(),
                                     [&](const plan::PlannedTask& t) {
                                       return t.kind() == "compute" && t.task() == entry.task();
                                     });
      ASSERT_NE(task, plan.planned_tasks().end());
      EXPECT_LE(task->start_s(), entry.start_s());
      EXPECT_LT(entry.start_s(), entry.end_s());
      EXPECT_LE(entry.end_s(), task->end_s() * (1 + 1e-12));
    }
    EXPECT_EQ(planned, inline_collectives);
    for (int i = 1; i < plan.planned_tasks_size(); ++i) {
      EXPECT_LE(plan.planned_tasks(i - 1).start_s(), plan.planned_tasks(i).start_s());
    }
  }
  const std::string text = formats::schedule_text(plans, 200);
  const std::string compute_row = text.substr(text.find("rank 0 compute"));
  EXPECT_NE(compute_row.substr(0, compute_row.find('\n')).find("AR"), std::string::npos) << text;
}

}  // namespace
}  // namespace piper::planner::sim
