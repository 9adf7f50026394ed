#include "planner/sim/overlapped_pairs.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace piper::planner::sim {
namespace {

bool pipelined(const ir::Task& task) {
  return task.kind == ir::TaskKind::kCompute && task.pass != ir::Pass::kUpdate;
}

// The devices a task runs on, whichever replica each runs (DualPipe's mirror devices list a
// stage's replicas in either order).
std::vector<int> device_set(const ir::Task& task) {
  std::vector<int> devices = task.devices;
  std::sort(devices.begin(), devices.end());
  return devices;
}

// A task's place in its devices' orders: its devices, and the compute tasks on them it is
// ordered after and before.
using OrderKey = std::tuple<std::vector<int>, std::vector<ir::TaskId>, std::vector<ir::TaskId>>;

// Whether a path of edges leads from `from` to `to`; only tasks before `to` in the
// topological order can lie on one.
bool reaches(const std::vector<std::vector<ir::TaskId>>& successors,
             const std::vector<size_t>& position, ir::TaskId from, ir::TaskId to) {
  std::vector<ir::TaskId> stack{from};
  std::set<ir::TaskId> seen{from};
  while (!stack.empty()) {
    const ir::TaskId id = stack.back();
    stack.pop_back();
    for (ir::TaskId next : successors[id]) {
      if (next == to) return true;
      if (position[next] < position[to] && seen.insert(next).second) stack.push_back(next);
    }
  }
  return false;
}

// The task of `tasks` (a group's tasks on one stream) that every other one follows by a path
// of edges, or -1: the member itself, the others what only runs after it (ZeRO-2's
// accumulation of each gradient bucket after its reduce-scatter, which the order binds as
// well, having the member's pass, microbatch and tags).
ir::TaskId head(const std::vector<std::vector<ir::TaskId>>& successors,
                const std::vector<size_t>& position, const std::vector<ir::TaskId>& tasks) {
  const ir::TaskId earliest =
      *std::min_element(tasks.begin(), tasks.end(),
                        [&](ir::TaskId x, ir::TaskId y) { return position[x] < position[y]; });
  for (ir::TaskId other : tasks) {
    if (other != earliest && !reaches(successors, position, earliest, other)) return -1;
  }
  return earliest;
}

}  // namespace

std::vector<OverlappedPair> overlapped_pairs(const ir::TaskGraph& graph) {
  const int n = graph.num_tasks();
  std::vector<std::vector<ir::TaskId>> before(static_cast<size_t>(n)), after(before);
  std::vector<std::vector<ir::TaskId>> successors(static_cast<size_t>(n));
  for (const ir::Edge& edge : graph.edges()) {
    successors[edge.from].push_back(edge.to);
    const ir::Task& from = graph.task(edge.from);
    const ir::Task& to = graph.task(edge.to);
    if (edge.kind != ir::EdgeKind::kTemporal || !pipelined(from) || !pipelined(to) ||
        device_set(from) != device_set(to)) {
      continue;
    }
    before[edge.to].push_back(edge.from);
    after[edge.from].push_back(edge.to);
  }
  std::map<OrderKey, std::vector<ir::TaskId>> groups;
  for (ir::TaskId id = 0; id < n; ++id) {
    if (!pipelined(graph.task(id)) || (before[id].empty() && after[id].empty())) continue;
    std::sort(before[id].begin(), before[id].end());
    std::sort(after[id].begin(), after[id].end());
    groups[{device_set(graph.task(id)), before[id], after[id]}].push_back(id);
  }
  std::vector<ir::TaskId> order = graph.topological_order();
  std::vector<size_t> position(static_cast<size_t>(n));
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::vector<OverlappedPair> pairs;
  for (const auto& [key, members] : groups) {
    std::map<std::string, std::vector<ir::TaskId>> by_stream;
    for (ir::TaskId id : members) by_stream[graph.task(id).stream].push_back(id);
    if (by_stream.size() != 2) continue;
    const ir::TaskId a = head(successors, position, by_stream.begin()->second);
    const ir::TaskId b = head(successors, position, by_stream.rbegin()->second);
    if (a < 0 || b < 0) continue;
    const auto [first, second] = position[a] < position[b] ? std::pair{a, b} : std::pair{b, a};
    if (reaches(successors, position, first, second)) continue;
    pairs.push_back({first, second});
  }
  std::sort(pairs.begin(), pairs.end(),
            [&](const auto& x, const auto& y) { return position[x.first] < position[y.first]; });
  return pairs;
}

}  // namespace piper::planner::sim
