#include "planner/sim/step_simulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <stdexcept>
#include <utility>

#include "formats/error.h"
#include "planner/sim/overlapped_pairs.h"

namespace piper::planner::sim {
namespace {

class Replay {
 public:
  Replay(const ir::TaskGraph& graph, const TaskDuration& duration,
         const PairDuration& pair_duration)
      : graph_(graph),
        duration_(duration),
        pair_duration_(pair_duration),
        predecessors_(static_cast<size_t>(graph.num_tasks())),
        successors_(static_cast<size_t>(graph.num_tasks())),
        spans_(static_cast<size_t>(graph.num_tasks())),
        partner_(static_cast<size_t>(graph.num_tasks()), -1) {
    for (const ir::Edge& edge : graph.edges()) {
      predecessors_.at(edge.to).push_back(edge.from);
      successors_.at(edge.from).push_back(edge.to);
    }
    result_.devices.resize(static_cast<size_t>(std::max(graph.world_size(), 0)));
  }

  StepSimulation run() {
    std::vector<ir::TaskId> order;
    try {
      order = graph_.topological_order();
    } catch (const std::logic_error& error) {
      throw Error(std::string("cannot simulate the step: ") + error.what());
    }
    for (const OverlappedPair& pair : overlapped_pairs(graph_)) {
      partner_[pair.first] = pair.second;
      partner_[pair.second] = pair.first;
    }
    for (ir::TaskId id : with_pairs_together(order)) {
      if (partner_[id] < 0) {
        schedule(id);
      } else if (spans_[id].empty()) {
        schedule_pair(id, partner_[id]);
      }
    }
    finish();
    return std::move(result_);
  }

 private:
  // `order` with each pair's members next to each other, at the first's place where the
  // second's predecessors allow, else as soon after as they do: Kahn's algorithm over the
  // DAG with each pair one node, taking the ready node first in `order`, which gives
  // `order` itself when there are no pairs.
  std::vector<ir::TaskId> with_pairs_together(const std::vector<ir::TaskId>& order) const {
    const size_t n = order.size();
    std::vector<size_t> position(n);
    for (size_t i = 0; i < n; ++i) position[order[i]] = i;
    const auto node = [&](ir::TaskId id) {
      const ir::TaskId partner = partner_[id];
      return partner >= 0 && position[partner] < position[id] ? partner : id;
    };
    std::vector<int> indegree(n, 0);
    for (const ir::Edge& edge : graph_.edges()) {
      if (node(edge.from) != node(edge.to)) ++indegree[node(edge.to)];
    }
    std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
    for (size_t i = 0; i < n; ++i) {
      if (node(order[i]) == order[i] && indegree[order[i]] == 0) ready.push(i);
    }
    std::vector<ir::TaskId> result;
    while (!ready.empty()) {
      const ir::TaskId id = order[ready.top()];
      ready.pop();
      std::vector<ir::TaskId> members{id};
      if (partner_[id] >= 0) members.push_back(partner_[id]);
      for (ir::TaskId member : members) {
        result.push_back(member);
        for (ir::TaskId next : successors_[member]) {
          const ir::TaskId to = node(next);
          if (to != id && --indegree[to] == 0) ready.push(position[to]);
        }
      }
    }
    if (result.size() != n) {
      throw Error("cannot simulate the step: an overlapped pair closes a cycle of tasks");
    }
    return result;
  }

  // Records the spans of `id`, one per entry of its devices, as its stream's latest work.
  void commit(ir::TaskId id) {
    const ir::Task& task = graph_.task(id);
    const std::vector<TaskSpan>& spans = spans_[id];
    for (size_t i = 0; i < task.devices.size(); ++i) {
      free_[{task.devices[i], task.stream}] = spans[i].end;
      result_.devices[task.devices[i]].tasks.push_back(spans[i]);
      result_.step = std::max(result_.step, spans[i].end);
    }
  }

  void check_devices(ir::TaskId id) const {
    for (int device : graph_.task(id).devices) {
      if (device < 0 || device >= static_cast<int>(result_.devices.size())) {
        throw Error("cannot simulate the step: " + graph_.describe(id) + " is on device " +
                    std::to_string(device));
      }
    }
  }

  void check_seconds(double seconds, const std::string& what) const {
    if (!std::isfinite(seconds) || seconds < 0) {
      throw Error("cannot simulate the step: " + what + " takes " + std::to_string(seconds) + " s");
    }
  }

  // On each device both replicas start when both are ready there, and end together.
  void schedule_pair(ir::TaskId first, ir::TaskId second) {
    const double seconds = pair_duration_(first, second);
    check_seconds(seconds, graph_.describe(first) + " overlapped with " + graph_.describe(second));
    check_devices(first);
    check_devices(second);
    const std::vector<int>& devices = graph_.task(first).devices;
    const std::vector<int>& others = graph_.task(second).devices;
    spans_[first].resize(devices.size());
    spans_[second].resize(others.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      const size_t j =
          static_cast<size_t>(std::find(others.begin(), others.end(), devices[i]) - others.begin());
      const double start = std::max(ready(first, devices[i], -1), ready(second, devices[i], -1));
      spans_[first][i] = {first, start, start + seconds};
      spans_[second].at(j) = {second, start, start + seconds};
    }
    commit(first);
    commit(second);
  }

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
    check_seconds(seconds, graph_.describe(id));
    check_devices(id);
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
    commit(id);
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
  const PairDuration& pair_duration_;
  std::vector<std::vector<ir::TaskId>> predecessors_;
  std::vector<std::vector<ir::TaskId>> successors_;
  std::vector<std::vector<TaskSpan>> spans_;            // per task, one per entry of its devices
  std::vector<ir::TaskId> partner_;                     // per task, its pair's other member or -1
  std::map<std::pair<int, std::string>, double> free_;  // (device, stream) -> when free
  StepSimulation result_;
};

}  // namespace

StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration,
                        const PairDuration& pair_duration) {
  return Replay(graph, duration, pair_duration).run();
}

StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration) {
  return simulate(graph, duration,
                  [&](ir::TaskId a, ir::TaskId b) { return duration(a) + duration(b); });
}

StepSimulation simulate(const ir::TaskGraph& graph, const DeviceRates& rates) {
  rates.check();
  return simulate(
      graph, [&](ir::TaskId id) { return task_seconds(graph, id, rates); },
      [&](ir::TaskId a, ir::TaskId b) { return pair_seconds(graph, a, b, rates); });
}

}  // namespace piper::planner::sim
