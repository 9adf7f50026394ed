#include "planner/lower/dag_index.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "planner/ir/placement.h"

namespace piper::planner {

DagIndex::DagIndex(const ir::TaskGraph& graph)
    : graph_(graph),
      device_tasks_(static_cast<size_t>(graph.world_size())),
      into_(static_cast<size_t>(graph.num_tasks())),
      out_of_(static_cast<size_t>(graph.num_tasks())) {
  for (ir::TaskId id : graph.topological_order()) {
    for (int device : graph.task(id).devices) {
      std::vector<ir::TaskId>& tasks = device_tasks_.at(device);
      // A task listing a device twice is the device's once.
      if (tasks.empty() || tasks.back() != id) tasks.push_back(id);
    }
  }
  for (const ir::Edge& edge : graph.edges()) {
    into_.at(edge.to).push_back(edge);
    out_of_.at(edge.from).push_back(edge);
  }
  everyone_.resize(static_cast<size_t>(graph.num_ranks()));
  std::iota(everyone_.begin(), everyone_.end(), 0);
  const ir::OpGraph& ops = graph.op_graph();
  const ir::OpId norm = ops.grad_norm >= 0 ? ops.producer(ops.grad_norm) : -1;
  if (norm >= 0) norm_squares_ = ops.op(norm).inputs.at(0);
  for (const ir::Task& task : graph.tasks()) {
    microbatches_ = std::max(microbatches_, task.microbatch + 1);
    holds_different_parameters_ |= task.kind == ir::TaskKind::kSend;
  }
  // Replicas bound to initializers of their own (experts) hold different parameters too.
  for (const ir::Tensor& tensor : ops.tensors()) {
    holds_different_parameters_ |= !tensor.replica_initializers.empty();
  }
  if (graph.shard_groups.empty()) group_ids_[1] = make_group_ids(1);
  for (const auto& group : graph.shard_groups) {
    const int parts = static_cast<int>(group.size());
    if (!group_ids_.count(parts)) group_ids_[parts] = make_group_ids(parts);
  }
}

const std::vector<ir::TaskId>& DagIndex::device_tasks(int device) const {
  static const std::vector<ir::TaskId> kNone;
  return device >= 0 && device < static_cast<int>(device_tasks_.size()) ? device_tasks_[device]
                                                                        : kNone;
}

ir::TaskId DagIndex::sending_task(ir::TaskId recv) const {
  for (const ir::Edge& edge : edges_into(recv)) {
    if (graph_.task(edge.from).kind == ir::TaskKind::kSend) return edge.from;
  }
  throw std::logic_error(graph_.describe(recv) + " has no send");
}

std::vector<int> DagIndex::ranks_of(const std::vector<int>& devices, int member) const {
  if (graph_.shard_groups.empty()) return devices;
  std::vector<int> ranks;
  for (int device : devices) ranks.push_back(graph_.shard_groups.at(device).at(member));
  return ranks;
}

std::vector<int> DagIndex::collective_ranks(const ir::Task& task, int member, int parts) const {
  const bool norm = task.kind == ir::TaskKind::kAllReduce && norm_squares_ >= 0 &&
                    task.tensors.at(0) == norm_squares_;
  return norm && parts > 1 ? everyone_ : ranks_of(task.devices, member);
}

bool DagIndex::averages_over_replicas(const ir::Task& task) const {
  const ir::OpGraph& ops = graph_.op_graph();
  return std::any_of(task.ops.begin(), task.ops.end(), [&](ir::OpId op) {
    return ir::attr_string(ops.op(op).attributes, "group", "") == "replicas";
  });
}

std::map<std::vector<int>, int> DagIndex::make_group_ids(int parts) const {
  std::map<std::vector<int>, int> ids;
  const auto add = [&](const std::vector<int>& ranks) {
    ids.emplace(ranks, static_cast<int>(ids.size()));
  };
  for (const auto& group : graph_.shard_groups) add(group);
  for (int member = 0; member < parts; ++member) {
    for (const ir::Task& task : graph_.tasks()) {
      if (task.kind != ir::TaskKind::kCompute && task.kind != ir::TaskKind::kSend &&
          task.kind != ir::TaskKind::kRecv) {
        add(collective_ranks(task, member, parts));
      }
    }
  }
  // Expert parallelism's reshards and the batch means' averages run over the replicas of the
  // task that needs them.
  for (const ir::Task& task : graph_.tasks()) {
    if (task.kind != ir::TaskKind::kCompute || task.devices.size() < 2 ||
        (graph_.op_graph().replica_group == 0 && !averages_over_replicas(task))) {
      continue;
    }
    for (int member = 0; member < parts; ++member) add(ranks_of(task.devices, member));
  }
  if (holds_different_parameters_) add(everyone_);
  return ids;
}

}  // namespace piper::planner
