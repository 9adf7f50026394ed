#include "planner/sim/planned_timeline.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
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
                              const DeviceTimeline& timeline,
                              const std::vector<bool>& has_reshards) {
  std::vector<Entry> entries;
  for (const TaskSpan& span : timeline.tasks) {
    const ir::Task& task = graph.task(span.task);
    entries.push_back({span, false, task.kind});
    if (task.kind != ir::TaskKind::kCompute || !has_reshards[span.task]) continue;
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

// Where the pipeline's stages run: the devices of each stage's tasks (the tag "PP" of its
// forwards), in replica order, and each rank's stages.
class StageLayout {
 public:
  explicit StageLayout(const ir::TaskGraph& graph) {
    for (const ir::Task& task : graph.tasks()) {
      const std::optional<int> stage = stage_of(task);
      if (!stage || task.pass != ir::Pass::kForward) continue;
      devices_.emplace(*stage, task.devices);
      for (int device : task.devices) stages_of_[device].insert(*stage);
    }
    const int count = devices_.empty() ? 0 : devices_.rbegin()->first + 1;
    mirrored_ = count >= 2;
    v_shaped_ = count >= 2 && count % 2 == 0;
    for (int s = 0; s < count; ++s) {
      const auto here = devices_.find(s), there = devices_.find(count - 1 - s);
      if (here == devices_.end() || there == devices_.end()) {
        mirrored_ = v_shaped_ = false;
        break;
      }
      // DualPipe: replica 2j+1 of stage s runs where replica 2j of stage S-1-s does.
      const std::vector<int>& a = here->second;
      const std::vector<int>& b = there->second;
      mirrored_ = mirrored_ && a.size() % 2 == 0 && a.size() == b.size();
      for (size_t i = 1; mirrored_ && i < a.size(); i += 2) mirrored_ = a[i] == b[i - 1];
      // DualPipeV: stage s on the devices of stage S-1-s.
      v_shaped_ = v_shaped_ && a == b;
    }
    count_ = count;
  }

  static std::optional<int> stage_of(const ir::Task& task) {
    const auto tag = task.tags.find("PP");
    if (task.kind != ir::TaskKind::kCompute || task.pass == ir::Pass::kUpdate ||
        tag == task.tags.end()) {
      return std::nullopt;
    }
    return static_cast<int>(tag->second);
  }

  int chunk(int device, int stage) const {
    const auto held = stages_of_.find(device);
    if (held == stages_of_.end()) return 0;
    return static_cast<int>(std::distance(held->second.begin(), held->second.find(stage)));
  }

  int direction(const ir::Task& task, int device, int stage) const {
    if (v_shaped_) return 2 * stage >= count_ ? 1 : 0;
    if (!mirrored_) return 0;
    const auto at = std::find(task.devices.begin(), task.devices.end(), device);
    return static_cast<int>(at - task.devices.begin()) % 2;
  }

 private:
  std::map<int, std::vector<int>> devices_;
  std::map<int, std::set<int>> stages_of_;
  int count_ = 0;
  bool mirrored_ = false;
  bool v_shaped_ = false;
};

std::string task_label(const ir::TaskGraph& graph, const ir::Task& task) {
  const std::string microbatch = std::to_string(task.microbatch);
  const bool loss = std::find(task.tensors.begin(), task.tensors.end(), graph.op_graph().loss) !=
                    task.tensors.end();
  switch (task.kind) {
    case ir::TaskKind::kCompute:
      return task.pass == ir::Pass::kUpdate ? "U" : ir::to_string(task.pass) + microbatch;
    case ir::TaskKind::kSend:
      return (loss ? "L" : "S") + microbatch;
    case ir::TaskKind::kRecv:
      return (loss ? "L" : "R") + microbatch;
    default:
      return kind_label(task.kind);
  }
}

PlannedTimeline::PlannedTimeline(const ir::TaskGraph& graph, const DeviceRates& rates)
    : graph_(graph),
      rates_(rates),
      simulation_(simulate(graph, rates)),
      layout_(std::make_unique<const StageLayout>(graph)),
      flops_(static_cast<size_t>(graph.num_tasks()), 0.0),
      has_reshards_(static_cast<size_t>(graph.num_tasks()), false) {
  std::vector<ReshardSpan> reshards;
  for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
    const ir::Task& task = graph.task(id);
    if (task.kind != ir::TaskKind::kCompute || task.devices.empty()) continue;
    flops_[id] = task_flops(graph, task);
    reshards.clear();
    reshard_spans(graph, task, task.devices[0], rates, &reshards);
    has_reshards_[id] = !reshards.empty();
  }
}

PlannedTimeline::~PlannedTimeline() = default;

void PlannedTimeline::add_to(plan::Plan& plan, int device) const {
  if (device < 0 || device >= static_cast<int>(simulation_.devices.size())) return;
  const DeviceTimeline& timeline = simulation_.devices[device];
  plan.clear_planned_tasks();
  for (const Entry& entry : entries_of(graph_, rates_, device, timeline, has_reshards_)) {
    const ir::Task& task = graph_.task(entry.span.task);
    plan::PlannedTask& out = *plan.add_planned_tasks();
    out.set_task(entry.span.task);
    out.set_stream(task.stream);
    out.set_pass(planner::to_plan(task.pass));
    out.set_microbatch(task.microbatch);
    out.set_kind(ir::to_string(entry.kind));
    out.set_label(entry.reshard ? kind_label(entry.kind) : task_label(graph_, task));
    out.set_start_s(entry.span.start);
    out.set_end_s(entry.span.end);
    if (const std::optional<int> stage = StageLayout::stage_of(task)) {
      out.set_stage(*stage);
      out.set_chunk(layout_->chunk(device, *stage));
      out.set_direction(layout_->direction(task, device, *stage));
    }
  }
  double flops = 0;
  for (const TaskSpan& span : timeline.tasks) {
    const ir::Task& task = graph_.task(span.task);
    if (task.kind == ir::TaskKind::kCompute) flops += flops_[span.task];
  }
  plan::PlannedStep& step = *plan.mutable_planned_step();
  step.set_flops(flops);
  step.set_step_s(simulation_.step);
  step.set_busy_s(timeline.busy);
  step.set_bubble_fraction(timeline.bubble_fraction);
}

void add_planned_timeline(const ir::TaskGraph& graph, const DeviceRates& rates,
                          std::vector<plan::Plan>& plans) {
  const PlannedTimeline timeline(graph, rates);
  for (size_t rank = 0; rank < plans.size(); ++rank) {
    timeline.add_to(plans[rank], static_cast<int>(rank));
  }
}

}  // namespace piper::planner::sim
