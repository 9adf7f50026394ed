#include "planner/directives/backward_split.h"

#include <algorithm>
#include <set>
#include <vector>

namespace piper::planner {
namespace {

using TensorSet = std::set<ir::TensorId>;

// Tensors a task reads and writes: its ops' inputs and outputs, or a
// transfer's or collective's (input, output) tensors.
TensorSet tensors_of(const ir::TaskGraph& graph, ir::TaskId id, bool written) {
  const ir::Task& task = graph.task(id);
  const ir::OpGraph& ops = graph.op_graph();
  TensorSet result;
  switch (task.kind) {
    case ir::TaskKind::kCompute:
      for (ir::OpId op : task.ops) {
        for (ir::TensorId tensor : written ? ops.op(op).outputs : ops.op(op).inputs) {
          if (tensor >= 0) result.insert(tensor);
        }
      }
      break;
    case ir::TaskKind::kSend:
      if (!written) result.insert(task.tensors.begin(), task.tensors.end());
      break;
    case ir::TaskKind::kRecv:
    case ir::TaskKind::kAllReduce:
      if (written || task.kind == ir::TaskKind::kAllReduce) {
        result.insert(task.tensors.begin(), task.tensors.end());
      }
      break;
    default:  // (input, output) pairs
      for (size_t i = written ? 1 : 0; i < task.tensors.size(); i += 2) {
        result.insert(task.tensors[i]);
      }
      break;
  }
  return result;
}

bool intersects(const TensorSet& a, const TensorSet& b) {
  return std::any_of(a.begin(), a.end(), [&](ir::TensorId t) { return b.count(t) > 0; });
}

// Which ops of one backward task only parameter gradients need: an op whose
// every output is a trained gradient, a partial that piper.Accumulate adds
// into one, unread (reduced by a collective), or read only by such ops of the
// task (the dW products). A tensor another task reads is an input gradient.
class WeightGradients {
 public:
  WeightGradients(const ir::OpGraph& ops, const ir::Task& task)
      : ops_(ops), inside_(task.ops.begin(), task.ops.end()), memo_(ops.num_tensors(), -1) {
    for (const ir::TrainedParameter& trained : ops.trained) memo_[trained.gradient] = 1;
  }

  bool only_for_weights(ir::OpId id) {
    bool any = false;
    for (ir::TensorId out : ops_.op(id).outputs) {
      if (out < 0) continue;
      if (!feeds_only_weights(out)) return false;
      any = true;
    }
    return any;
  }

 private:
  bool feeds_only_weights(ir::TensorId tensor) {
    if (memo_[tensor] < 0) {
      const std::vector<ir::OpId> readers = ops_.consumers(tensor);
      memo_[tensor] = std::all_of(readers.begin(), readers.end(), [&](ir::OpId reader) {
        return ops_.op(reader).type == "piper.Accumulate" ||
               (inside_.count(reader) && only_for_weights(reader));
      });
    }
    return memo_[tensor] == 1;
  }

  const ir::OpGraph& ops_;
  const std::set<ir::OpId> inside_;
  std::vector<int> memo_;  // per tensor: -1 unknown, 0 no, 1 yes
};

void split_one(ir::TaskGraph& graph, ir::TaskId id) {
  const ir::Task original = graph.task(id);
  WeightGradients weights(graph.op_graph(), original);
  ir::Task input = original;
  ir::Task weight = original;
  input.pass = ir::Pass::kBackwardInput;
  weight.pass = ir::Pass::kBackwardWeight;
  input.ops.clear();
  weight.ops.clear();
  for (size_t i = 0; i < original.ops.size(); ++i) {
    (weights.only_for_weights(original.ops[i]) ? weight.ops : input.ops).push_back(original.ops[i]);
  }
  std::vector<ir::TaskId> parts;
  if (!input.ops.empty()) parts.push_back(graph.add_task(std::move(input)));
  if (!weight.ops.empty()) parts.push_back(graph.add_task(std::move(weight)));
  // Each edge goes to the parts that exchange tensors along it; an edge
  // that carries none (temporal) goes to every part.
  const std::vector<ir::Edge> edges = graph.edges();
  for (const ir::Edge& edge : edges) {
    if (edge.to != id && edge.from != id) continue;
    const bool incoming = edge.to == id;
    const ir::TaskId other = incoming ? edge.from : edge.to;
    const TensorSet carried = tensors_of(graph, other, incoming);
    std::vector<ir::TaskId> ends;
    for (ir::TaskId part : parts) {
      if (intersects(tensors_of(graph, part, !incoming), carried)) ends.push_back(part);
    }
    if (ends.empty() || edge.kind != ir::EdgeKind::kData) ends = parts;
    for (ir::TaskId part : ends) {
      graph.add_edge(incoming ? other : part, incoming ? part : other, edge.kind);
    }
  }
  if (parts.size() == 2 &&
      intersects(tensors_of(graph, parts[0], true), tensors_of(graph, parts[1], false))) {
    graph.add_edge(parts[0], parts[1], ir::EdgeKind::kData);
  }
}

// Joins the last of `parts` (consecutive parts of one task) to the parts before it: a data
// edge from each part that writes what it reads (not only the one just before it: a layer's
// activation gradient may be read several parts on), and at least the order after the part
// just before it.
void chain(ir::TaskGraph& graph, const std::vector<ir::TaskId>& parts) {
  const ir::TaskId to = parts.back();
  const TensorSet read = tensors_of(graph, to, false);
  bool after_previous = false;
  for (size_t k = 0; k + 1 < parts.size(); ++k) {
    if (!intersects(tensors_of(graph, parts[k], true), read)) continue;
    graph.add_edge(parts[k], to, ir::EdgeKind::kData);
    if (k + 2 == parts.size()) after_previous = true;
  }
  if (!after_previous) graph.add_edge(parts[parts.size() - 2], to, ir::EdgeKind::kTemporal);
}

}  // namespace

std::vector<ir::TaskId> cut_task(ir::TaskGraph& graph, ir::TaskId id,
                                 const std::vector<size_t>& ends, bool detached_tail) {
  const ir::Task original = graph.task(id);
  const std::vector<ir::Edge> edges = graph.edges();
  std::vector<ir::TaskId> parts = {id};
  size_t begin = ends.front() + 1;
  graph.task(id).ops.assign(original.ops.begin(), original.ops.begin() + begin);
  for (size_t k = 1; k <= ends.size(); ++k) {
    const size_t end = k < ends.size() ? ends[k] + 1 : original.ops.size();
    ir::Task part = original;
    part.ops.assign(original.ops.begin() + begin, original.ops.begin() + end);
    parts.push_back(graph.add_task(std::move(part)));
    chain(graph, parts);
    begin = end;
  }
  for (const ir::Edge& edge : edges) {
    if (edge.to == id && edge.kind == ir::EdgeKind::kData) {
      // Each part that reads what the edge carries is joined to its writer.
      const TensorSet carried = tensors_of(graph, edge.from, true);
      for (size_t k = 1; k < parts.size(); ++k) {
        if (intersects(tensors_of(graph, parts[k], false), carried)) {
          graph.add_edge(edge.from, parts[k], edge.kind);
        }
      }
    }
    if (edge.from != id) continue;
    const TensorSet carried = tensors_of(graph, edge.to, false);
    bool sent = false;  // by a part that writes what the edge carries (`id`'s edge is there)
    for (size_t k = 0; k < parts.size() && edge.kind == ir::EdgeKind::kData; ++k) {
      if (!intersects(tensors_of(graph, parts[k], true), carried)) continue;
      if (k > 0) graph.add_edge(parts[k], edge.to, edge.kind);
      sent = true;
    }
    if (!sent) graph.add_edge(parts[parts.size() - (detached_tail ? 2 : 1)], edge.to, edge.kind);
  }
  return parts;
}

void split_backward(ir::TaskGraph& graph, const std::vector<ir::TaskId>& ids) {
  std::vector<bool> drop(graph.num_tasks());
  for (ir::TaskId id : ids) {
    split_one(graph, id);
    drop[id] = true;
  }
  drop.resize(graph.num_tasks());
  graph.remove_tasks(drop);
}

}  // namespace piper::planner
