// place: puts the selected tasks on a device set and a stream.
#include "formats/error.h"
#include "planner/directives/directive.h"

namespace piper::planner {

void apply_place(ir::TaskGraph& graph, const DirectiveContext& context) {
  const auto& spec = std::get<strategy::PlaceDirective>(context.directive.spec);
  if (spec.devices != std::vector<int64_t>{0}) {
    // Other devices need send/recv insertion and a communicator (pipeline and
    // data-parallel issues).
    throw Error(context.where("devices") +
                ": placing tasks on devices other than [0] is not implemented yet");
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
