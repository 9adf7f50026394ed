#include "planner/sim/planned_timeline.h"

#include <algorithm>
#include <tuple>

#include "planner/lower/lower.h"
#include "planner/sim/step_simulation.h"

namespace piper::planner::sim {
namespace {

std::string kind_label(ir::TaskKind kind) {
  switch (kind) {
    case ir::TaskKind::kAllReduce:
      return "AR";
    case ir::TaskKind::kReduceScatter:
      return "RS";
    case ir::TaskKind::kAllGather:
      return "AG";
    case ir::TaskKind::kAllToAll:
      return "A2A";
    case ir::TaskKind::kBroadcast:
      return "BC";
    default:
      return "?";
  }
}

// A planned entry: a task's span, or (reshard) one of its reshards within it.
struct Entry {
  TaskSpan span;
  bool reshard = false;
  ir::TaskKind kind = ir::TaskKind::kCompute;
};

// The device's task spans, each compute task followed by its reshards, ordered by start (a
// task before the reshards that start with it, so pictures draw them over it).
std::vector<Entry> entries_of(const ir::TaskGraph& graph, const DeviceRates& rates, int device,
                              const DeviceTimeline& timeline) {
  std::vector<Entry> entries;
  for (const TaskSpan& span : timeline.tasks) {
    const ir::Task& task = graph.task(span.task);
    entries.push_back({span, false, task.kind});
    if (task.kind != ir::TaskKind::kCompute) continue;
    std::vector<ReshardSpan> reshards;
    reshard_spans(graph, task, device, rates, &reshards);
    for (const ReshardSpan& reshard : reshards) {
      entries.push_back({TaskSpan{span.task, span.start + reshard.start, span.start + reshard.end},
                         true, reshard.kind});
    }
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.span.start, a.reshard, a.span.end) <
           std::tie(b.span.start, b.reshard, b.span.end);
  });
  return entries;
}

}  // namespace

std::string task_label(const ir::Task& task) {
  const std::string microbatch = std::to_string(task.microbatch);
  switch (task.kind) {
    case ir::TaskKind::kCompute:
      return task.pass == ir::Pass::kUpdate ? "U" : ir::to_string(task.pass) + microbatch;
    case ir::TaskKind::kSend:
      return "S" + microbatch;
    case ir::TaskKind::kRecv:
      return "R" + microbatch;
    default:
      return kind_label(task.kind);
  }
}

void add_planned_timeline(const ir::TaskGraph& graph, const DeviceRates& rates,
                          std::vector<plan::Plan>& plans) {
  const StepSimulation simulation = simulate(graph, rates);
  for (size_t rank = 0; rank < plans.size() && rank < simulation.devices.size(); ++rank) {
    const DeviceTimeline& device = simulation.devices[rank];
    plan::Plan& plan = plans[rank];
    plan.clear_planned_tasks();
    for (const Entry& entry : entries_of(graph, rates, static_cast<int>(rank), device)) {
      const ir::Task& task = graph.task(entry.span.task);
      plan::PlannedTask& out = *plan.add_planned_tasks();
      out.set_task(entry.span.task);
      out.set_stream(task.stream);
      out.set_pass(planner::to_plan(task.pass));
      out.set_microbatch(task.microbatch);
      out.set_kind(ir::to_string(entry.kind));
      out.set_label(entry.reshard ? kind_label(entry.kind) : task_label(task));
      out.set_start_s(entry.span.start);
      out.set_end_s(entry.span.end);
    }
    double flops = 0;
    for (const TaskSpan& span : device.tasks) {
      const ir::Task& task = graph.task(span.task);
      if (task.kind == ir::TaskKind::kCompute) flops += task_flops(graph, task);
    }
    plan::PlannedStep& step = *plan.mutable_planned_step();
    step.set_flops(flops);
    step.set_step_s(simulation.step);
    step.set_busy_s(device.busy);
    step.set_bubble_fraction(device.bubble_fraction);
  }
}

}  // namespace piper::planner::sim
