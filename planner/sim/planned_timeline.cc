#include "planner/sim/planned_timeline.h"

#include <algorithm>
#include <tuple>

#include "planner/lower/lower.h"
#include "planner/sim/step_simulation.h"

namespace piper::planner::sim {
std::string task_label(const ir::Task& task) {
  const std::string microbatch = std::to_string(task.microbatch);
  switch (task.kind) {
    case ir::TaskKind::kCompute:
      return task.pass == ir::Pass::kUpdate ? "U" : ir::to_string(task.pass) + microbatch;
    case ir::TaskKind::kSend:
      return "S" + microbatch;
    case ir::TaskKind::kRecv:
      return "R" + microbatch;
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
  }
  return "?";
}

void add_planned_timeline(const ir::TaskGraph& graph, const DeviceRates& rates,
                          std::vector<plan::Plan>& plans) {
  const StepSimulation simulation = simulate(graph, rates);
  for (size_t rank = 0; rank < plans.size() && rank < simulation.devices.size(); ++rank) {
    const DeviceTimeline& device = simulation.devices[rank];
    std::vector<TaskSpan> spans = device.tasks;
    std::stable_sort(spans.begin(), spans.end(), [](const TaskSpan& a, const TaskSpan& b) {
      return std::tie(a.start, a.end) < std::tie(b.start, b.end);
    });
    plan::Plan& plan = plans[rank];
    plan.clear_planned_tasks();
    for (const TaskSpan& span : spans) {
      const ir::Task& task = graph.task(span.task);
      plan::PlannedTask& out = *plan.add_planned_tasks();
      out.set_task(span.task);
      out.set_stream(task.stream);
      out.set_pass(planner::to_plan(task.pass));
      out.set_microbatch(task.microbatch);
      out.set_kind(ir::to_string(task.kind));
      out.set_label(task_label(task));
      out.set_start_s(span.start);
      out.set_end_s(span.end);
    }
    plan::PlannedStep& step = *plan.mutable_planned_step();
    step.set_step_s(simulation.step);
    step.set_busy_s(device.busy);
    step.set_bubble_fraction(device.bubble_fraction);
  }
}

}  // namespace piper::planner::sim
