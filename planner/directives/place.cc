// place: puts the selected tasks on a device set and a stream. Several devices
// are replicas (replicate keeps them in sync); where data now crosses device
// sets, transfers carry it (transfers.h).
#include "formats/error.h"
#include "planner/directives/directive.h"
#include "planner/directives/transfers.h"

namespace piper::planner {

void apply_place(ir::TaskGraph& graph, const DirectiveContext& context) {
  const auto& spec = std::get<strategy::PlaceDirective>(context.directive.spec);
  int selected = 0;
  for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
    ir::Task& task = graph.task(id);
    if (task.kind != ir::TaskKind::kCompute || !selects(spec.filter, task)) continue;
    task.devices.assign(spec.devices.begin(), spec.devices.end());
    task.stream = spec.stream;
    ++selected;
  }
  if (selected == 0) {
    throw Error(context.where("filter") + ": " + strategy::to_json(spec.filter).dump() +
                " selects no task; tasks take their tags from $.annotations (a pipeline's "
                "stages are the values 0, 1, ... of its tag, or give it \"stages\": \"auto\")");
  }
  route_transfers(graph, context);
}

}  // namespace piper::planner
