// order: on one device, every task that group i selects runs before any task
// that group i+1 selects (temporal edges); the tasks of one group may
// overlap. Filters naming BI or BW first split the backward tasks they
// select (backward_split.h). Memory windows that earlier directives derived
// from the task order then (replicate, recompute) give way where they clash.
// An order that contradicts dataflow or an earlier order, or that deadlocks
// with what other devices were ordered to do, is refused naming the device
// and the first task that could never run.
#include <algorithm>
#include <optional>
#include <queue>

#include "formats/error.h"
#include "planner/directives/backward_split.h"
#include "planner/directives/directive.h"

namespace piper::planner {
namespace {

using strategy::Filter;
using strategy::OrderDirective;

bool names_split_pass(const Filter& filter) { return filter.pass == "BI" || filter.pass == "BW"; }

// The filter as it selects the backward task a BI or BW filter splits.
Filter as_backward(Filter filter) {
  filter.pass = "B";
  return filter;
}

class Ordering {
 public:
  Ordering(ir::TaskGraph& graph, const DirectiveContext& context)
      : graph_(graph), spec_(std::get<OrderDirective>(context.directive.spec)), context_(context) {}

  void run() {
    split_named_backwards();
    const std::vector<std::vector<ir::TaskId>> groups = matched_groups();
    std::vector<ir::Edge> added;
    const std::vector<ir::TaskId>* previous = nullptr;
    for (const auto& group : groups) {
      if (group.empty()) continue;
      if (previous) {
        for (ir::TaskId from : *previous) {
          for (ir::TaskId to : group) added.push_back({from, to, ir::EdgeKind::kTemporal});
        }
      }
      previous = &group;
    }
    check_dataflow(added, groups);
    const std::vector<ir::Edge> yielded = yield_windows(added, groups);
    for (const ir::Edge& edge : added) graph_.add_edge(edge.from, edge.to, edge.kind);
    restore_windows(yielded);
  }

 private:
  bool on_device(const ir::Task& task) const {
    return !spec_.device ||
           std::find(task.devices.begin(), task.devices.end(), *spec_.device) != task.devices.end();
  }

  void split_named_backwards() {
    std::vector<ir::TaskId> backwards;
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const ir::Task& task = graph_.task(id);
      if (task.kind != ir::TaskKind::kCompute || task.pass != ir::Pass::kBackward ||
          !on_device(task)) {
        continue;
      }
      for (const auto& group : spec_.filters) {
        if (std::any_of(group.begin(), group.end(), [&](const Filter& filter) {
              return names_split_pass(filter) && selects(as_backward(filter), task);
            })) {
          backwards.push_back(id);
          break;
        }
      }
    }
    if (!backwards.empty()) split_backward(graph_, backwards);
  }

  // The compute tasks each group selects on the device. Without "device"
  // they must all live on one device set.
  std::vector<std::vector<ir::TaskId>> matched_groups() {
    std::vector<std::vector<ir::TaskId>> groups(spec_.filters.size());
    std::optional<ir::TaskId> first;
    for (size_t g = 0; g < spec_.filters.size(); ++g) {
      for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
        const ir::Task& task = graph_.task(id);
        if (task.kind != ir::TaskKind::kCompute || !on_device(task)) continue;
        const auto& filters = spec_.filters[g];
        if (std::none_of(filters.begin(), filters.end(),
                         [&](const Filter& filter) { return selects(filter, task); })) {
          continue;
        }
        if (!first) first = id;
        // With "device" the tasks may be replicated over different device sets (DualPipe's
        // mirrored stages); the order binds them on that device.
        if (!spec_.device && graph_.task(*first).devices != task.devices) {
          throw Error(context_.where("filters") + ": the groups select " + graph_.describe(*first) +
                      " and " + graph_.describe(id) +
                      ", which run on different devices; an order applies on one device: give "
                      "\"device\" or narrow the filters");
        }
        groups[g].push_back(id);
      }
    }
    if (!first) {
      throw Error(context_.where("filters") + ": the filters select no task" +
                  (spec_.device ? " on device " + std::to_string(*spec_.device) : ""));
    }
    device_ = spec_.device ? static_cast<int>(*spec_.device) : graph_.task(*first).devices[0];
    return groups;
  }

  // Refuses `added` when some task could never run by dataflow alone.
  void check_dataflow(const std::vector<ir::Edge>& added,
                      const std::vector<std::vector<ir::TaskId>>& groups) const {
    std::vector<ir::Edge> data;
    for (const ir::Edge& edge : graph_.edges()) {
      if (edge.kind == ir::EdgeKind::kData) data.push_back(edge);
    }
    if (const auto stuck = first_stuck(data, added, groups)) {
      throw Error(context_.where("filters") + ": on device " + std::to_string(device_) +
                  " this order contradicts dataflow: " + graph_.describe(*stuck) +
                  " can never run, since it would have to wait for a task that needs its "
                  "results; put the tasks in an order their data allows");
    }
  }

  // The memory windows (kWindow edges) that earlier directives read off the
  // task order of their time give way where they clash with this order: the
  // ones among this device's tasks are removed and returned, for
  // restore_windows to put back those this order agrees with. Refuses
  // `added` when tasks still could not run: it contradicts an earlier order
  // here, or deadlocks with the orders of other devices.
  std::vector<ir::Edge> yield_windows(const std::vector<ir::Edge>& added,
                                      const std::vector<std::vector<ir::TaskId>>& groups) {
    if (!first_stuck(graph_.edges(), added, groups)) return {};
    const std::vector<ir::Edge>& edges = graph_.edges();
    std::vector<bool> drop(edges.size());
    std::vector<ir::Edge> kept, dropped;
    for (size_t i = 0; i < edges.size(); ++i) {
      drop[i] =
          edges[i].kind == ir::EdgeKind::kWindow && local(edges[i].from) && local(edges[i].to);
      (drop[i] ? dropped : kept).push_back(edges[i]);
    }
    const auto stuck = first_stuck(kept, added, groups);
    if (!stuck) {
      graph_.remove_edges(drop);
      return dropped;
    }
    if (!first_stuck(without_local_orderings(), added, groups)) {
      throw Error(context_.where("filters") + ": on device " + std::to_string(device_) +
                  " this order contradicts an earlier order of this device's tasks: " +
                  graph_.describe(*stuck) + " can never run; write the two as one order");
    }
    throw Error(
        context_.where("filters") + ": on device " + std::to_string(device_) +
        " this order deadlocks with the orders of other devices: " + graph_.describe(*stuck) +
        " can never run, since the devices would wait on each other; order "
        "transfers' producers and consumers alike on both sides");
  }

  // Puts back the windows that run forward in the task order now, so none
  // can close a cycle.
  void restore_windows(const std::vector<ir::Edge>& windows) {
    if (windows.empty()) return;
    const std::vector<ir::TaskId> order = graph_.topological_order();
    std::vector<size_t> position(order.size());
    for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
    for (const ir::Edge& edge : windows) {
      if (position[edge.from] < position[edge.to]) graph_.add_edge(edge.from, edge.to, edge.kind);
    }
  }

  bool local(ir::TaskId id) const {
    const std::vector<int>& devices = graph_.task(id).devices;
    return std::find(devices.begin(), devices.end(), device_) != devices.end();
  }

  // Every edge but the temporal ones among this device's tasks, to tell a
  // clash with an earlier order here from a deadlock across devices.
  std::vector<ir::Edge> without_local_orderings() const {
    std::vector<ir::Edge> kept;
    for (const ir::Edge& edge : graph_.edges()) {
      if (edge.kind == ir::EdgeKind::kData || !local(edge.from) || !local(edge.to)) {
        kept.push_back(edge);
      }
    }
    return kept;
  }

  // The task of this device that cannot run under `edges` + `added`, the one
  // earliest in the order; nullopt when every task can run.
  std::optional<ir::TaskId> first_stuck(const std::vector<ir::Edge>& edges,
                                        const std::vector<ir::Edge>& added,
                                        const std::vector<std::vector<ir::TaskId>>& groups) const {
    std::vector<int> indegree(graph_.num_tasks());
    std::vector<std::vector<ir::TaskId>> successors(graph_.num_tasks());
    for (const auto* list : {&edges, &added}) {
      for (const ir::Edge& edge : *list) {
        successors[edge.from].push_back(edge.to);
        ++indegree[edge.to];
      }
    }
    std::queue<ir::TaskId> ready;
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      if (indegree[id] == 0) ready.push(id);
    }
    while (!ready.empty()) {
      const ir::TaskId id = ready.front();
      ready.pop();
      for (ir::TaskId next : successors[id]) {
        if (--indegree[next] == 0) ready.push(next);
      }
    }
    for (const auto& group : groups) {
      for (ir::TaskId id : group) {
        if (indegree[id] > 0) return id;
      }
    }
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      if (indegree[id] > 0) return id;
    }
    return std::nullopt;
  }

  ir::TaskGraph& graph_;
  const OrderDirective& spec_;
  const DirectiveContext& context_;
  int device_ = 0;
};

}  // namespace

void apply_order(ir::TaskGraph& graph, const DirectiveContext& context) {
  Ordering(graph, context).run();
}

}  // namespace piper::planner
