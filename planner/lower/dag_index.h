// What lowering reads of the whole task DAG, the same for every rank: computed once per DAG, in
// time linear in its tasks and edges, so that lowering a rank costs what the rank's own tasks
// do and planning n ranks is linear in n (issue 18).
#pragma once

#include <map>
#include <vector>

#include "planner/ir/task_graph.h"

namespace piper::planner {

class DagIndex {
 public:
  explicit DagIndex(const ir::TaskGraph& graph);

  const ir::TaskGraph& graph() const { return graph_; }
  // The tasks on `device` (a device of the DAG: a tensor-parallel group's, with shard_groups), in
  // topological_order().
  const std::vector<ir::TaskId>& device_tasks(int device) const;
  // The edges into and out of a task, in the order of graph.edges().
  const std::vector<ir::Edge>& edges_into(ir::TaskId id) const { return into_.at(id); }
  const std::vector<ir::Edge>& edges_out_of(ir::TaskId id) const { return out_of_.at(id); }
  // The send a recv receives: its first data or temporal predecessor that is a send.
  // Throws std::logic_error for a recv without one.
  ir::TaskId sending_task(ir::TaskId recv) const;

  // The ranks that run `devices` as member `member` of their tensor-parallel groups.
  std::vector<int> ranks_of(const std::vector<int>& devices, int member) const;
  // The ranks of a collective task as member `member` of each group of `parts` runs it. The
  // norm's sum of squares adds every rank's share, across tensor-parallel groups too.
  std::vector<int> collective_ranks(const ir::Task& task, int member, int parts) const;
  // Whether a compute task averages over its replicas (the batch means' averages).
  bool averages_over_replicas(const ir::Task& task) const;
  // Communicator group ids, the same on every rank of a job whose tensor-parallel groups have
  // `parts` members: those groups first, then the groups of each collective task as every
  // member runs it, then the replicas of compute tasks with reshards or averages over them,
  // then (pipelines) everyone. Ranks in group order -> id.
  const std::map<std::vector<int>, int>& group_ids(int parts) const { return group_ids_.at(parts); }

  // One more than the largest microbatch of any task.
  int microbatches() const { return microbatches_; }
  // Whether devices hold different parameters (a pipeline: there are sends), which
  // --save-onnx then collects over everyone.
  bool holds_different_parameters() const { return holds_different_parameters_; }
  const std::vector<int>& everyone() const { return everyone_; }
  // graph().num_ranks(), which counts the devices of every task: read once per rank, it made
  // planning n ranks quadratic.
  int num_ranks() const { return static_cast<int>(everyone_.size()); }
  ir::TensorId norm_squares() const { return norm_squares_; }

 private:
  std::map<std::vector<int>, int> make_group_ids(int parts) const;

  const ir::TaskGraph& graph_;
  std::vector<std::vector<ir::TaskId>> device_tasks_;
  std::vector<std::vector<ir::Edge>> into_;
  std::vector<std::vector<ir::Edge>> out_of_;
  std::vector<int> everyone_;       // every rank of the job
  ir::TensorId norm_squares_ = -1;  // the gradient norm's all-reduced sum of squares
  int microbatches_ = 1;
  bool holds_different_parameters_ = false;
  std::map<int, std::map<std::vector<int>, int>> group_ids_;  // by tensor-parallel group size
};

}  // namespace piper::planner
