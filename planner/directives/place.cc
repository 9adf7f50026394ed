// place: puts the selected tasks on a device set and a stream.
#include <algorithm>

#include "formats/error.h"
#include "planner/directives/directive.h"

namespace piper::planner {

void apply_place(ir::TaskGraph& graph, const DirectiveContext& context) {
  const auto& spec = std::get<strategy::PlaceDirective>(context.directive.spec);
  const bool everything =
      std::all_of(graph.tasks().begin(), graph.tasks().end(),
                  [&](const ir::Task& task) { return selects(spec.filter, task); });
  if (spec.devices != std::vector<int64_t>{0} && !everything) {
    // Moving part of the model elsewhere needs send/recv insertion (pipeline issue).
    throw Error(context.where("devices") +
                ": placing some tasks on other devices (pipeline stages) is not implemented "
                "yet; place every task (filter {}) on replicas, or on [0]");
  }
  int selected = 0;
  for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
    ir::Task& task = graph.task(id);
    if (!selects(spec.filter, task)) continue;
    task.devices.assign(spec.devices.begin(), spec.devices.end());
    task.stream = spec.stream;
    ++selected;
  }
  if (selected == 0) {
    throw Error(context.where("filter") + ": the filter selects no task");
  }
}

}  // namespace piper::planner
