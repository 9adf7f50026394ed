// Replays one training step of the physical task DAG in time, the way the
// engine runs the lowered plans: each (device, stream) is a serial queue that
// takes its tasks in the lowering's emission order (the DAG's
// topological_order(), as planner/lower does), and a task starts when its
// stream is free and every predecessor, data or temporal, on any device, has
// finished. A task on several devices runs on each of them:
//   - a compute task runs independently on each replica;
//   - a collective starts on all its devices together, when the last of them
//     is ready, and ends together;
//   - a recv joined by a data edge to its peer's send overlaps that send: it
//     starts when its own stream and other predecessors are free and the send
//     has started, and ends when the send ends (at once, if the data already
//     arrived). A send's duration is the transfer's.
// Predecessors on another device count from their end there (or their latest
// end, for a task on several other devices).
// An overlapped pair (overlapped_pairs.h: the two compute tasks of one order group, DualPipe's
// forward and backward of two microbatches) runs as one unit: both start together when both
// are ready and both streams are free, and both end when the pair's time has passed (the
// pair's duration, F&B: with the cost model pair_seconds, else the sum of the two). The pair
// takes its place in the emission order at its first member; without pairs the order is the
// DAG's topological order exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "planner/ir/task_graph.h"
#include "planner/sim/cost_model.h"

namespace piper::planner::sim {

struct TaskSpan {
  ir::TaskId task = -1;
  double start = 0;  // seconds from the start of the step
  double end = 0;
};

struct DeviceTimeline {
  std::vector<TaskSpan> tasks;  // this device's instances, in emission order
  // Time some compute task runs here (intervals on several streams count once).
  double busy = 0;
  double bubble_fraction = 0;  // 1 - busy / step (1 for a device without work)
};

struct StepSimulation {
  double step = 0;                      // when the last task on any device ends
  std::vector<DeviceTimeline> devices;  // index = device, world_size() of them
};

// When some compute task runs on a device: its compute spans in time order, merged where they
// overlap (spans on several streams count once). DeviceTimeline::busy is their total.
std::vector<std::pair<double, double>> compute_intervals(const ir::TaskGraph& graph,
                                                         const DeviceTimeline& device);

// Seconds one instance of a task takes; must be finite and not negative.
using TaskDuration = std::function<double(ir::TaskId)>;
// Seconds an overlapped pair takes (its first member, then its second); the same bounds.
using PairDuration = std::function<double(ir::TaskId, ir::TaskId)>;

// Throws piper::Error when the DAG has a cycle (naming a task on it) or a
// duration is negative or not finite (naming the task).
StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration,
                        const PairDuration& pair_duration);
// Pairs take the sum of their members' durations.
StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration);

// Where the devices of a node share their compute (node_contention.h), a simulation's
// `duration` and `pair_duration` are a compute task's and a pair's times while every other device
// of its node computes, and these their times while none does.
struct SharedCompute {
  int64_t devices_per_node = 0;  // as formats::Cluster's: 0 for one node
  TaskDuration alone;
  PairDuration pair_alone;
};
// The step with each compute instance timed through NodeContention: the replay above again and
// again, each time through the compute spans of the two passes before, until the step moves by
// at most 0.1% (at most 8 passes: on a 1024-rank pipeline of 16 stages the step still drifts by
// 0.4% a pass after 8, each pass costing 0.7 s there).
StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration,
                        const PairDuration& pair_duration, const SharedCompute& shared);
// With durations from the cost model; with shared compute where its measured costs hold times
// alone (formats/measured_costs.h).
StepSimulation simulate(const ir::TaskGraph& graph, const DeviceRates& rates);

}  // namespace piper::planner::sim
