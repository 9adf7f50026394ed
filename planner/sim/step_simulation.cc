#include "planner/sim/step_simulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <queue>
#include <stdexcept>
#include <utility>

#include "formats/error.h"
#include "planner/sim/node_contention.h"
#include "planner/sim/overlapped_pairs.h"

namespace piper::planner::sim {
namespace {

class Replay {
 public:
  // With `contention`, compute instances and pairs take their times through it, `shared`'s
  // times alone at one end.
  Replay(const ir::TaskGraph& graph, const TaskDuration& duration,
         const PairDuration& pair_duration, const SharedCompute* shared = nullptr,
         const NodeContention* contention = nullptr)
      : graph_(graph),
        duration_(duration),
        pair_duration_(pair_duration),
        shared_(shared),
        contention_(contention),
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
    const std::string what = graph_.describe(first) + " overlapped with " + graph_.describe(second);
    const double seconds = pair_duration_(first, second);
    check_seconds(seconds, what);
    const double alone = contention_ ? shared_->pair_alone(first, second) : seconds;
    check_seconds(alone, what + " alone");
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
      const double end = ends(devices[i], start, seconds, alone);
      spans_[first][i] = {first, start, end};
      spans_[second].at(j) = {second, start, end};
    }
    commit(first);
    commit(second);
  }

  // When a compute instance (or pair) on `device` that starts at `start` ends.
  double ends(int device, double start, double together, double alone) const {
    return contention_ ? contention_->end(device, start, together, alone) : start + together;
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
      const double alone = contention_ ? shared_->alone(id) : seconds;
      check_seconds(alone, graph_.describe(id) + " alone");
      for (int device : task.devices) {
        const double start = ready(id, device, -1);
        spans.push_back({id, start, ends(device, start, seconds, alone)});
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
      for (const auto& [start, end] : compute_intervals(graph_, device)) device.busy += end - start;
      device.bubble_fraction = result_.step > 0 ? 1.0 - device.busy / result_.step : 1.0;
    }
  }

  const ir::TaskGraph& graph_;
  const TaskDuration& duration_;
  const PairDuration& pair_duration_;
  const SharedCompute* shared_;
  const NodeContention* contention_;
  std::vector<std::vector<ir::TaskId>> predecessors_;
  std::vector<std::vector<ir::TaskId>> successors_;
  std::vector<std::vector<TaskSpan>> spans_;            // per task, one per entry of its devices
  std::vector<ir::TaskId> partner_;                     // per task, its pair's other member or -1
  std::map<std::pair<int, std::string>, double> free_;  // (device, stream) -> when free
  StepSimulation result_;
};

// `duration` asked once per task (a pair's: once per first member).
template <typename... Partner>
std::function<double(ir::TaskId, Partner...)> remembered(
    const ir::TaskGraph& graph, std::function<double(ir::TaskId, Partner...)> duration) {
  auto seconds = std::make_shared<std::vector<double>>(static_cast<size_t>(graph.num_tasks()), -1);
  return [seconds, duration = std::move(duration)](ir::TaskId id, Partner... partner) {
    double& known = seconds->at(static_cast<size_t>(id));
    if (known < 0) known = duration(id, partner...);
    return known;
  };
}

}  // namespace

std::vector<std::pair<double, double>> compute_intervals(const ir::TaskGraph& graph,
                                                         const DeviceTimeline& device) {
  std::vector<std::pair<double, double>> spans;
  for (const TaskSpan& span : device.tasks) {
    if (graph.task(span.task).kind == ir::TaskKind::kCompute && span.end > span.start) {
      spans.emplace_back(span.start, span.end);
    }
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& span : spans) {
    if (!merged.empty() && span.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, span.second);
    } else {
      merged.push_back(span);
    }
  }
  return merged;
}

StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration,
                        const PairDuration& pair_duration) {
  return Replay(graph, duration, pair_duration).run();
}

StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration) {
  return simulate(graph, duration,
                  [&](ir::TaskId a, ir::TaskId b) { return duration(a) + duration(b); });
}

StepSimulation simulate(const ir::TaskGraph& graph, const TaskDuration& duration,
                        const PairDuration& pair_duration, const SharedCompute& shared) {
  // Each pass asks every duration again: ask the cost model once.
  const TaskDuration each = remembered(graph, duration);
  const PairDuration each_pair = remembered(graph, pair_duration);
  const SharedCompute each_alone{shared.devices_per_node, remembered(graph, shared.alone),
                                 remembered(graph, shared.pair_alone)};
  // A task's time depends on when its node's other devices compute, theirs on when it ends:
  // each pass times the instances through the spans of the two passes before, since one pass
  // alone would swing between two answers where two devices wait for each other.
  StepSimulation before = Replay(graph, each, each_pair).run();
  StepSimulation result = before;
  for (int pass = 0; pass < 8; ++pass) {
    const NodeContention contention(graph, {&before, &result}, shared.devices_per_node);
    StepSimulation next = Replay(graph, each, each_pair, &each_alone, &contention).run();
    const bool settled = std::abs(next.step - result.step) <= 1e-3 * next.step;
    before = std::move(result);
    result = std::move(next);
    if (settled) break;
  }
  return result;
}

StepSimulation simulate(const ir::TaskGraph& graph, const DeviceRates& rates) {
  rates.check();
  const TaskDuration duration = [&](ir::TaskId id) { return task_seconds(graph, id, rates); };
  const PairDuration pair_duration = [&](ir::TaskId a, ir::TaskId b) {
    return pair_seconds(graph, a, b, rates);
  };
  if (!rates.measured.has_alone()) return simulate(graph, duration, pair_duration);
  DeviceRates alone = rates;
  alone.measured = rates.measured.alone_on_node();
  const SharedCompute shared{
      rates.devices_per_node, [&](ir::TaskId id) { return task_seconds(graph, id, alone); },
      [&](ir::TaskId a, ir::TaskId b) { return pair_seconds(graph, a, b, alone); }};
  return simulate(graph, duration, pair_duration, shared);
}

}  // namespace piper::planner::sim
