#include "planner/expert_exchanges.h"

#include <set>
#include <vector>

#include "planner/directives/backward_split.h"

namespace piper::planner {
namespace {

bool is_expert_exchange(const ir::Op& op) {
  static const std::set<std::string> kExchanges = {"piper.AllToAll", "piper.AllToAllV",
                                                   "piper.AllToAllVReturn"};
  return kExchanges.count(op.type) > 0 && ir::reshards_over_replicas(op);
}

}  // namespace

std::string exchange_stream(const std::string& stream) { return "a2a_" + stream; }

bool has_expert_exchanges(const ir::TaskGraph& graph) {
  const ir::OpGraph& ops = graph.op_graph();
  for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
    const ir::Task& task = graph.task(id);
    if (task.kind != ir::TaskKind::kCompute) continue;
    for (ir::OpId op : task.ops) {
      if (is_expert_exchange(ops.op(op))) return true;
    }
  }
  return false;
}

int separate_expert_exchanges(ir::TaskGraph& graph) {
  const ir::OpGraph& ops = graph.op_graph();
  const int original = graph.num_tasks();
  int separated = 0;
  for (ir::TaskId id = 0; id < original; ++id) {
    const ir::Task& task = graph.task(id);
    if (task.kind != ir::TaskKind::kCompute) continue;
    // Cut before and after each exchange: the positions each part ends at.
    std::set<size_t> ends;
    for (size_t i = 0; i < task.ops.size(); ++i) {
      if (!is_expert_exchange(ops.op(task.ops[i]))) continue;
      if (i > 0) ends.insert(i - 1);
      ends.insert(i);
    }
    ends.erase(task.ops.size() - 1);
    if (ends.empty()) {
      // A task that is one exchange already stands alone.
      if (task.ops.size() == 1 && is_expert_exchange(ops.op(task.ops[0]))) {
        graph.task(id).stream = exchange_stream(task.stream);
        ++separated;
      }
      continue;
    }
    const std::string stream = task.stream;
    for (ir::TaskId part : cut_task(graph, id, {ends.begin(), ends.end()})) {
      ir::Task& cut = graph.task(part);
      if (cut.ops.size() == 1 && is_expert_exchange(ops.op(cut.ops[0]))) {
        cut.stream = exchange_stream(stream);
        ++separated;
      }
    }
  }
  return separated;
}

}  // namespace piper::planner
