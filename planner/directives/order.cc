// order: on one device, every task that group i selects runs before any task
// that group i+1 selects (temporal edges); the tasks of one group may
// overlap. Filters naming BI or BW first split the backward tasks they
// select (backward_split.h). An order that contradicts dataflow, or that
// deadlocks with what other devices were ordered to do, is refused naming
// the device and the first task that could never run.
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
    check_runnable(added, groups);
    for (const ir::Edge& edge : added) graph_.add_edge(edge.from, edge.to, edge.kind);
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
        if (graph_.task(*first).devices != task.devices) {
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

  // Refuses `added` when some task could never run: first against dataflow
  // alone, then together with every ordering already made.
  void check_runnable(const std::vector<ir::Edge>& added,
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
    if (const auto stuck = first_stuck(graph_.edges(), added, groups)) {
      throw Error(
          context_.where("filters") + ": on device " + std::to_string(device_) +
          " this order deadlocks with the orders of other devices: " + graph_.describe(*stuck) +
          " can never run, since the devices would wait on each other; order "
          "transfers' producers and consumers alike on both sides");
    }
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
