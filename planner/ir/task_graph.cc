#include "planner/ir/task_graph.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <queue>
#include <stdexcept>

namespace piper::ir {
namespace {

constexpr const char* kTaskKindNames[] = {"compute",    "send",           "recv",
                                          "all_reduce", "reduce_scatter", "all_gather",
                                          "all_to_all", "broadcast"};

}  // namespace

std::string to_string(TaskKind kind) { return kTaskKindNames[static_cast<int>(kind)]; }

TaskKind parse_task_kind(const std::string& text) {
  for (size_t i = 0; i < std::size(kTaskKindNames); ++i) {
    if (text == kTaskKindNames[i]) return static_cast<TaskKind>(i);
  }
  throw std::invalid_argument("unknown task kind '" + text + "'");
}

std::string to_string(EdgeKind kind) {
  switch (kind) {
    case EdgeKind::kData:
      return "data";
    case EdgeKind::kTemporal:
      return "temporal";
    case EdgeKind::kWindow:
      return "window";
  }
  return "?";
}

TaskId TaskGraph::add_task(Task task) {
  tasks_.push_back(std::move(task));
  return num_tasks() - 1;
}

size_t TaskGraph::EdgeHash::operator()(const Edge& edge) const {
  const auto from = static_cast<uint64_t>(static_cast<uint32_t>(edge.from));
  const auto to = static_cast<uint64_t>(static_cast<uint32_t>(edge.to));
  return std::hash<uint64_t>()((from << 32 | to) * 3 + static_cast<uint64_t>(edge.kind));
}

void TaskGraph::index_edges() {
  edge_set_.clear();
  edge_set_.insert(edges_.begin(), edges_.end());
}

void TaskGraph::add_edge(TaskId from, TaskId to, EdgeKind kind) {
  const Edge edge{from, to, kind};
  if (edge_set_.insert(edge).second) edges_.push_back(edge);
}

void TaskGraph::remove_tasks(const std::vector<bool>& drop) {
  std::vector<TaskId> renumbered(tasks_.size(), -1);
  std::vector<Task> kept;
  for (TaskId id = 0; id < num_tasks(); ++id) {
    if (drop.at(id)) continue;
    renumbered[id] = static_cast<TaskId>(kept.size());
    kept.push_back(std::move(tasks_[id]));
  }
  std::vector<Edge> kept_edges;
  for (const Edge& edge : edges_) {
    if (renumbered[edge.from] >= 0 && renumbered[edge.to] >= 0) {
      kept_edges.push_back({renumbered[edge.from], renumbered[edge.to], edge.kind});
    }
  }
  tasks_ = std::move(kept);
  edges_ = std::move(kept_edges);
  index_edges();
}

void TaskGraph::remove_edges(const std::vector<bool>& drop) {
  std::vector<Edge> kept;
  for (size_t i = 0; i < edges_.size(); ++i) {
    if (!drop.at(i)) kept.push_back(edges_[i]);
  }
  edges_ = std::move(kept);
  index_edges();
}

std::vector<TaskId> TaskGraph::topological_order() const {
  std::vector<int> indegree(tasks_.size(), 0);
  std::vector<std::vector<TaskId>> successors(tasks_.size());
  for (const Edge& edge : edges_) {
    successors.at(edge.from).push_back(edge.to);
    ++indegree.at(edge.to);
  }
  // (0 for transfers, 1 for the rest; id): transfers first, then by id.
  using Rank = std::pair<int, TaskId>;
  const auto rank = [&](TaskId id) {
    const TaskKind kind = tasks_[id].kind;
    return Rank{kind == TaskKind::kSend || kind == TaskKind::kRecv ? 0 : 1, id};
  };
  std::priority_queue<Rank, std::vector<Rank>, std::greater<>> ready;
  for (TaskId id = 0; id < num_tasks(); ++id) {
    if (indegree[id] == 0) ready.push(rank(id));
  }
  std::vector<TaskId> order;
  while (!ready.empty()) {
    const TaskId id = ready.top().second;
    ready.pop();
    order.push_back(id);
    for (TaskId next : successors[id]) {
      if (--indegree[next] == 0) ready.push(rank(next));
    }
  }
  if (order.size() != tasks_.size()) {
    for (TaskId id = 0; id < num_tasks(); ++id) {
      if (indegree[id] > 0) {
        throw std::logic_error("the task DAG has a cycle through " + describe(id));
      }
    }
  }
  return order;
}

int TaskGraph::world_size() const {
  int largest = 0;
  for (const Task& task : tasks_) {
    for (int device : task.devices) largest = std::max(largest, device);
  }
  return largest + 1;
}

int TaskGraph::num_ranks() const {
  if (shard_groups.empty()) return world_size();
  int ranks = 0;
  for (const auto& group : shard_groups) ranks += static_cast<int>(group.size());
  return ranks;
}

std::string TaskGraph::describe(TaskId id) const {
  const Task& t = task(id);
  return "task " + std::to_string(id) + " (" + to_string(t.kind) + " " + to_string(t.pass) +
         " mb=" + std::to_string(t.microbatch) + " " + to_string(t.tags) + ")";
}

TaskGraph build_task_graph(OpGraph ops) {
  TaskGraph graph(std::move(ops));
  const OpGraph& op_graph = graph.op_graph();
  std::map<std::pair<Tags, Pass>, TaskId> task_of_key;
  std::vector<TaskId> task_of_op(op_graph.num_ops());
  for (OpId id = 0; id < op_graph.num_ops(); ++id) {
    const Op& op = op_graph.op(id);
    const auto key = std::make_pair(op.tags, op.pass);
    auto found = task_of_key.find(key);
    if (found == task_of_key.end()) {
      Task task;
      task.tags = op.tags;
      task.pass = op.pass;
      task.devices = {0};
      found = task_of_key.emplace(key, graph.add_task(std::move(task))).first;
    }
    graph.task(found->second).ops.push_back(id);
    task_of_op[id] = found->second;
  }
  std::vector<OpId> producer(op_graph.num_tensors(), -1);
  for (OpId id = 0; id < op_graph.num_ops(); ++id) {
    for (TensorId output : op_graph.op(id).outputs) {
      if (output >= 0) producer[output] = id;
    }
  }
  for (OpId id = 0; id < op_graph.num_ops(); ++id) {
    for (TensorId input : op_graph.op(id).inputs) {
      if (input < 0 || producer[input] < 0) continue;
      const TaskId from = task_of_op[producer[input]];
      const TaskId to = task_of_op[id];
      if (from != to) graph.add_edge(from, to, EdgeKind::kData);
    }
  }
  try {
    graph.topological_order();
  } catch (const std::logic_error& cycle) {
    throw std::invalid_argument(std::string(cycle.what()) +
                                ": the annotations split the model so that two groups of ops "
                                "depend on each other; give ops between them the same tags");
  }
  return graph;
}

}  // namespace piper::ir
