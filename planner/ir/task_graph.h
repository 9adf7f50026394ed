// The task DAG: what directives transform. A compute task is the set of ops
// sharing one tag tuple, pass and microbatch; comm tasks move tensors between
// device sets. Every task has a device set and a stream.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "planner/ir/op_graph.h"

namespace piper::ir {

enum class TaskKind {
  kCompute,
  kSend,
  kRecv,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kAllToAll,
  kBroadcast,
};

// kTemporal: one task before another (an order). kWindow: a temporal edge a
// directive adds to bound memory (ZeRO's gather prefetch and gradient
// accumulation windows, when a recompute runs), read off the task order of
// its time; a later order may drop those it contradicts.
enum class EdgeKind { kData, kTemporal, kWindow };

std::string to_string(TaskKind kind);
TaskKind parse_task_kind(const std::string& text);
std::string to_string(EdgeKind kind);

struct Task {
  TaskKind kind = TaskKind::kCompute;
  Tags tags;
  Pass pass = Pass::kForward;
  int microbatch = 0;
  std::vector<OpId> ops;  // compute tasks: in execution order
  std::vector<int> devices;
  std::string stream = "compute";
  // Comm tasks: the tensors moved, and for send/recv the device on the other side.
  // All-reduce: tensors reduced in place. Reduce-scatter and all-gather:
  // (input, output) pairs.
  std::vector<TensorId> tensors;
  int peer = -1;
  // Reductions divide by the number of devices (data-parallel averaging).
  bool average = false;
  // Comm tasks whose result only the update reads (gradient and loss reductions): they may run
  // behind computation (plan::Stream.background).
  bool background = false;
  // Send/recv: the replica whose value it moves (replica i of the writer feeds replica i of
  // the reader).
  int replica = 0;
};

struct Edge {
  TaskId from = -1;
  TaskId to = -1;
  EdgeKind kind = EdgeKind::kData;
  bool operator==(const Edge& other) const {
    return from == other.from && to == other.to && kind == other.kind;
  }
};

class TaskGraph {
 public:
  explicit TaskGraph(OpGraph ops) : ops_(std::move(ops)) {}

  const OpGraph& op_graph() const { return ops_; }
  OpGraph& op_graph() { return ops_; }

  TaskId add_task(Task task);
  void add_edge(TaskId from, TaskId to, EdgeKind kind);
  const Task& task(TaskId id) const { return tasks_.at(id); }
  Task& task(TaskId id) { return tasks_.at(id); }
  const std::vector<Task>& tasks() const { return tasks_; }
  const std::vector<Edge>& edges() const { return edges_; }
  int num_tasks() const { return static_cast<int>(tasks_.size()); }

  // Removes the tasks `drop` marks (indexed by task id) and every edge that
  // touches them; the remaining tasks keep their order and are renumbered.
  void remove_tasks(const std::vector<bool>& drop);
  // Removes the edges `drop` marks (indexed as edges()).
  void remove_edges(const std::vector<bool>& drop);

  // Tasks in an order that respects every edge, ties broken by id, except
  // that a send or recv runs as soon as it can: a transfer follows its
  // producer, and every pair of ranks sees its transfers in one order.
  // Throws std::logic_error naming a task on a cycle.
  std::vector<TaskId> topological_order() const;

  // Number of devices the tasks use: one more than the largest device index.
  int world_size() const;

  // A readable name for messages: "task 3 (compute F mb=0 {LAYER:1})".
  std::string describe(TaskId id) const;

  // The ranks the plans are for: world_size(), or with tensor parallelism every member of
  // every group.
  int num_ranks() const;

  // Tensor parallelism (directives/shard.cc): the op graph is what one member of a group runs,
  // and device d of the tasks stands for the group of ranks shard_groups[d], in group order.
  // Empty: devices are ranks.
  std::vector<std::vector<int>> shard_groups;

 private:
  // Hashes an edge for the set that keeps add_edge from scanning every edge.
  struct EdgeHash {
    size_t operator()(const Edge& edge) const;
  };
  void index_edges();

  OpGraph ops_;
  std::vector<Task> tasks_;
  std::vector<Edge> edges_;                      // in insertion order, which plans follow
  std::unordered_set<Edge, EdgeHash> edge_set_;  // the edges of edges_
};

// One compute task per (tags, pass) on device 0, stream "compute", microbatch 0,
// with data edges wherever an op of one task reads a tensor another writes.
// Throws std::invalid_argument naming two tasks when the grouping is cyclic.
TaskGraph build_task_graph(OpGraph ops);

}  // namespace piper::ir
