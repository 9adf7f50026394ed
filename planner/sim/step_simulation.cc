#include "planner/sim/step_simulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#include "formats/error.h"

namespace piper::planner::sim {
namespace {

class Replay {
 public:
  Replay(const ir::TaskGraph& graph, const TaskDuration& duration)
      : graph_(graph),
        duration_(duration),
        predecessors_(static_cast<size_t>(graph.num_tasks())),
        spans_(static_cast<size_t>(graph.num_tasks())) {
    for (const ir::Edge& edge : graph.edges()) predecessors_.at(edge.to).push_back(edge.from);
    result_.devices.resize(static_cast<size_t>(std::max(graph.world_size(), 0)));
  }

  StepSimulation run() {
    std::vector<ir::TaskId> order;
    try {
      order = graph_.topological_order();
    } catch (const std::logic_error& error) {
      throw Error(std::string("cannot simulate the step: ") + error.what());
    }
    for (ir::TaskId id : order) schedule(id);
    finish();
    return std::move(result_);
  }

 private:
  // When `pred` has finished as seen from `device`: its end there, or its
  // latest end when it runs elsewhere.
  double end_for(ir::TaskId pred, int device) const {
    const ir::Task& task = graph_.task(pred);
    double latest = 0;
    for (size_t i = 0; i < task.devices.size(); ++i) {
      if (task.devices[i] == device) return spans_[pred][i].end;
      latest = std::max(latest, spans_[pred][i].end);
    }
    return latest;
  }

  double ready(ir::TaskId id, int device, ir::TaskId skip) const {
    const auto free = free_.find({device, graph_.task(id).stream});
    double time = free == free_.end() ? 0.0 : free->second;
    for (ir::TaskId pred : predecessors_[id]) {
      if (pred != skip) time = std::max(time, end_for(pred, device));
    }
    return time;
  }

  // The send a recv receives from: a data predecessor on its peer sending to it.
  ir::TaskId matching_send(ir::TaskId recv) const {
    const ir::Task& task = graph_.task(recv);
    for (ir::TaskId pred : predecessors_[recv]) {
      const ir::Task& send = graph_.task(pred);
      if (send.kind == ir::TaskKind::kSend && send.devices.size() == 1 &&
          send.devices[0] == task.peer && send.peer == task.devices[0]) {
        return pred;
      }
    }
    return -1;
  }

  void schedule(ir::TaskId id) {
    const ir::Task& task = graph_.task(id);
    const double seconds = duration_(id);
    if (!std::isfinite(seconds) || seconds < 0) {
      throw Error("cannot simulate the step: " + graph_.describe(id) + " takes " +
                  std::to_string(seconds) + " s");
    }
    for (int device : task.devices) {
      if (device < 0 || device >= static_cast<int>(result_.devices.size())) {
        throw Error("cannot simulate the step: " + graph_.describe(id) + " is on device " +
                    std::to_string(device));
      }
    }
    std::vector<TaskSpan>& spans = spans_[id];
    if (task.kind == ir::TaskKind::kCompute) {
      for (int device : task.devices) {
        const double start = ready(id, device, -1);
        spans.push_back({id, start, start + seconds});
      }
    } else if (const ir::TaskId send = task.kind == ir::TaskKind::kRecv && task.devices.size() == 1
                                           ? matching_send(id)
                                           : -1;
               send >= 0) {
      const TaskSpan& sent = spans_[send][0];
      const double start = std::max(ready(id, task.devices[0], send), sent.start);
      spans.push_back({id, start, std::max(start, sent.end)});
    } else {
      // A collective (or a lone send or recv): every member starts when the last is ready.
      double start = 0;
      for (int device : task.devices) start = std::max(start, ready(id, device, -1));
      spans.assign(task.devices.size(), TaskSpan{id, start, start + seconds});
    }
    for (size_t i = 0; i < task.devices.size(); ++i) {
      free_[{task.devices[i], task.stream}] = spans[i].end;
      result_.devices[task.devices[i]].tasks.push_back(spans[i]);
      result_.step = std::max(result_.step, spans[i].end);
    }
  }

  void finish() {
    for (DeviceTimeline& device : result_.devices) {
      std::vector<std::pair<double, double>> compute;
      for (const TaskSpan& span : device.tasks) {
        if (graph_.task(span.task).kind == ir::TaskKind::kCompute) {
          compute.emplace_back(span.start, span.end);
        }
      }
      std::sort(compute.begin(), compute.end());
      double covered_until = 0;
      for (const auto& [start, end] : compute) {
        const double from = std::max(start, covered_until);
        if (end > from) device.busy += end - from;
        covered_until = std::max(covered_until, end);
      }
      device.bubble_fraction = result_.step > 0 ? 1.0 - device.busy / result_.step : 1.0;
    }
  }

  const ir::TaskGraph& graph_;
  const TaskDuration& duration_;
  std::vector<std::vector<ir::TaskId>> predecessors_;
  std::vector<std::vector<TaskSpan>> spans_;            // per task, one per entry of its devices
  std::map<std::pair<int, std::string>, double> free_;  // (device, stream) -> when free
  StepSimulation result_;
};

}  // namespace

StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration) {
  return Replay(graph, duration).run();
}

StepSimulation simulate(const ir::TaskGraph& graph, const DeviceRates& rates) {
  rates.check();
  return simulate(graph, [&](ir::TaskId id) { return task_seconds(graph, id, rates); });
}

}  // namespace piper::planner::sim
