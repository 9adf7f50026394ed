#include "planner/expert_exchanges.h"

#include <algorithm>
#include <map>
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

// A collective over the replicas that is not an exchange: the reduce-scatter of a split
// parameter's gradient that the backward computed from the rows (directives/shard.cc).
bool is_replica_reduction(const ir::Op& op) {
  return ir::reshards_over_replicas(op) && !is_expert_exchange(op) &&
         (op.type.starts_with("piper.All") || op.type == "piper.ReduceScatter");
}

// For each position of `task_ops`, the earlier positions it must follow: an op reads a tensor
// after its last write and writes it after the reads and writes before.
std::vector<std::vector<size_t>> dependencies(const ir::OpGraph& ops,
                                              const std::vector<ir::OpId>& task_ops) {
  std::vector<std::vector<size_t>> before(task_ops.size());
  std::map<ir::TensorId, size_t> writer;
  std::map<ir::TensorId, std::vector<size_t>> readers;  // since the last write
  for (size_t i = 0; i < task_ops.size(); ++i) {
    const ir::Op& op = ops.op(task_ops[i]);
    for (ir::TensorId tensor : op.inputs) {
      if (tensor < 0) continue;
      const auto found = writer.find(tensor);
      if (found != writer.end()) before[i].push_back(found->second);
      readers[tensor].push_back(i);
    }
    for (ir::TensorId tensor : op.outputs) {
      if (tensor < 0) continue;
      const auto found = writer.find(tensor);
      if (found != writer.end()) before[i].push_back(found->second);
      std::vector<size_t>& read = readers[tensor];
      before[i].insert(before[i].end(), read.begin(), read.end());
      read.clear();
      writer[tensor] = i;
    }
  }
  return before;
}

// `task_ops` reordered so that each exchange comes as early as what it reads allows: before
// it, in their order, only the ops it needs (what writes what it reads, and so on back, and what
// must precede those); every other op follows it. So a backward's dispatch gradient goes out
// after the experts' input gradients, before their weight gradients, and its wait for the peer
// falls under the overlapped partner's computation rather than after it has finished.
std::vector<ir::OpId> exchanges_early(const ir::OpGraph& ops,
                                      const std::vector<ir::OpId>& task_ops) {
  const size_t count = task_ops.size();
  const std::vector<std::vector<size_t>> before = dependencies(ops, task_ops);
  std::vector<bool> placed(count, false);
  std::vector<ir::OpId> ordered;
  ordered.reserve(count);
  for (size_t exchange = 0; exchange < count; ++exchange) {
    if (!is_expert_exchange(ops.op(task_ops[exchange]))) continue;
    std::vector<bool> needed(count, false);
    std::vector<size_t> stack = {exchange};
    needed[exchange] = true;
    while (!stack.empty()) {
      const size_t at = stack.back();
      stack.pop_back();
      for (size_t dependency : before[at]) {
        if (placed[dependency] || needed[dependency]) continue;
        needed[dependency] = true;
        stack.push_back(dependency);
      }
    }
    for (size_t i = 0; i <= exchange; ++i) {
      if (!needed[i]) continue;
      ordered.push_back(task_ops[i]);
      placed[i] = true;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (!placed[i]) ordered.push_back(task_ops[i]);
  }
  return ordered;
}

// `task_ops` with its replica reductions' tails last: each replica reduction and the ops after
// it that read only what it and they write, and constants (the gradient scaled to the replicas'
// mean and accumulated over the microbatches). Nothing else in the task reads a tail, so it
// may run after the task's last computation, on the exchange stream, where its wait for the
// peer rank holds back no computation: inline, a backward's reduce-scatter waited there for a
// late peer while its overlapped partner waited at an exchange for the same peer
// (bench/dualpipe_overlap.py). Returns the position the tails start at: `task_ops.size()` when
// there is none, or when another op must follow one (then nothing moves).
size_t tails_last(const ir::OpGraph& ops, std::vector<ir::OpId>& task_ops) {
  const size_t count = task_ops.size();
  std::vector<bool> tail(count, false);
  std::set<ir::TensorId> written;  // by the tails
  for (size_t i = 0; i < count; ++i) {
    const ir::Op& op = ops.op(task_ops[i]);
    const auto from_tail = [&](ir::TensorId t) { return written.count(t) > 0; };
    const bool follows =
        std::any_of(op.inputs.begin(), op.inputs.end(), from_tail) &&
        std::all_of(op.inputs.begin(), op.inputs.end(), [&](ir::TensorId t) {
          return t < 0 || from_tail(t) || ops.tensor(t).role == ir::Role::kConstant;
        });
    if (!is_replica_reduction(op) && !follows) continue;
    tail[i] = true;
    written.insert(op.outputs.begin(), op.outputs.end());
  }
  const size_t tails = std::count(tail.begin(), tail.end(), true);
  if (tails == 0 || tails == count) return count;
  const std::vector<std::vector<size_t>> before = dependencies(ops, task_ops);
  for (size_t i = 0; i < count; ++i) {
    if (tail[i]) continue;
    if (std::any_of(before[i].begin(), before[i].end(), [&](size_t j) { return tail[j]; })) {
      return count;
    }
  }
  std::vector<ir::OpId> ordered;
  ordered.reserve(count);
  for (bool last : {false, true}) {
    for (size_t i = 0; i < count; ++i) {
      if (tail[i] == last) ordered.push_back(task_ops[i]);
    }
  }
  task_ops = std::move(ordered);
  return count - tails;
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
    if (task.kind != ir::TaskKind::kCompute ||
        std::none_of(task.ops.begin(), task.ops.end(), [&](ir::OpId op) {
          return is_expert_exchange(ops.op(op)) || is_replica_reduction(ops.op(op));
        })) {
      continue;
    }
    std::vector<ir::OpId> ordered = exchanges_early(ops, task.ops);
    const size_t tail = tails_last(ops, ordered);
    const bool has_tail = tail < ordered.size();
    graph.task(id).ops = std::move(ordered);
    // Cut before and after each exchange, and before the tails: the positions each part ends at.
    std::set<size_t> ends;
    for (size_t i = 0; i < task.ops.size(); ++i) {
      if (!is_expert_exchange(ops.op(task.ops[i]))) continue;
      if (i > 0) ends.insert(i - 1);
      ends.insert(i);
    }
    if (has_tail) ends.insert(tail - 1);
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
    const std::vector<ir::TaskId> cut = cut_task(graph, id, {ends.begin(), ends.end()}, has_tail);
    for (ir::TaskId part : cut) {
      ir::Task& piece = graph.task(part);
      const bool exchange = piece.ops.size() == 1 && is_expert_exchange(ops.op(piece.ops[0]));
      if (exchange || (has_tail && part == cut.back())) piece.stream = exchange_stream(stream);
      separated += exchange;
    }
  }
  return separated;
}

}  // namespace piper::planner
