#include "planner/ir/verify.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include "planner/ir/placement.h"

namespace piper::ir {
namespace {

using DeviceSet = std::set<int>;

std::string devices_text(const DeviceSet& devices) {
  std::string text = "[";
  for (int device : devices) text += (text.size() > 1 ? "," : "") + std::to_string(device);
  return text + "]";
}

bool is_collective(TaskKind kind) {
  return kind != TaskKind::kCompute && kind != TaskKind::kSend && kind != TaskKind::kRecv;
}

bool is_always_available(Role role) {
  return role == Role::kParameter || role == Role::kConstant || role == Role::kInput ||
         role == Role::kOptimizerState;
}

bool contains(const std::vector<int>& items, int item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// What a send and its recv share: sender and receiver device, microbatch, replica, tensors.
struct TransferKey {
  int sender = -1;
  int receiver = -1;
  int microbatch = 0;
  int replica = 0;
  std::vector<TensorId> tensors;
  bool operator==(const TransferKey& other) const {
    return sender == other.sender && receiver == other.receiver && microbatch == other.microbatch &&
           replica == other.replica && tensors == other.tensors;
  }
};

struct TransferKeyHash {
  size_t operator()(const TransferKey& key) const {
    size_t hash = 0;
    const auto mix = [&](int64_t value) {
      hash ^= std::hash<int64_t>()(value) + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
    };
    mix(key.sender);
    mix(key.receiver);
    mix(key.microbatch);
    mix(key.replica);
    for (TensorId tensor : key.tensors) mix(tensor);
    return hash;
  }
};

// The sends and recvs of one transfer key, in task order.
struct Matches {
  std::vector<TaskId> sends;
  std::vector<TaskId> recvs;
};

// Checks one task graph; each check appends its messages. Later checks skip
// what earlier ones reported (edges to missing tasks, unknown ops and
// tensors), so a broken graph yields messages rather than exceptions.
class Verifier {
 public:
  explicit Verifier(const TaskGraph& graph) : graph_(graph), ops_(graph.op_graph()) {}

  std::vector<std::string> run() {
    index_op_graph();
    check_dynamic_dims();
    check_label_counts();
    check_tasks();
    check_edges();
    check_acyclic();
    check_op_assignment();
    for (TaskId id = 0; id < graph_.num_tasks(); ++id) {
      if (graph_.task(id).kind == TaskKind::kCompute) check_inputs(id);
    }
    check_sends_and_recvs();
    check_collectives();
    check_placements();
    return std::move(messages_);
  }

 private:
  void report(std::string message) { messages_.push_back(std::move(message)); }

  std::string describe(TaskId id) const { return graph_.describe(id); }
  std::string describe_op(OpId id) const {
    return "op " + std::to_string(id) + " (" + ops_.op(id).type + " \"" + ops_.op(id).name + "\")";
  }
  bool valid_task(TaskId id) const { return id >= 0 && id < graph_.num_tasks(); }
  bool valid_op(OpId id) const { return id >= 0 && id < ops_.num_ops(); }
  bool valid_tensor(TensorId id) const { return id >= 0 && id < ops_.num_tensors(); }
  std::string tensor_name(TensorId id) const {
    return valid_tensor(id) ? ops_.tensor(id).name : "#" + std::to_string(id);
  }

  // Producers of every tensor, and tensor ids that exist.
  void index_op_graph() {
    producer_.assign(ops_.num_tensors(), -1);
    for (OpId id = 0; id < ops_.num_ops(); ++id) {
      const Op& op = ops_.op(id);
      for (TensorId tensor : op.inputs) {
        if (tensor >= ops_.num_tensors() || tensor < -1) {
          report(describe_op(id) + " reads tensor id " + std::to_string(tensor) +
                 ", which does not exist");
        }
      }
      for (TensorId tensor : op.outputs) {
        if (valid_tensor(tensor)) {
          if (producer_[tensor] < 0) producer_[tensor] = id;
        } else if (tensor != -1) {
          report(describe_op(id) + " writes tensor id " + std::to_string(tensor) +
                 ", which does not exist");
        }
      }
    }
  }

  // Each run-time extent sizes an existing dimension, by a positive scale that divides its
  // bound, and is held by an int64 scalar.
  void check_dynamic_dims() {
    for (TensorId id = 0; id < ops_.num_tensors(); ++id) {
      const Tensor& tensor = ops_.tensor(id);
      int previous = -1;
      for (const DynamicDim& dim : tensor.dynamic) {
        const std::string where =
            "tensor " + tensor.name + " dynamic dimension " + std::to_string(dim.dim);
        if (dim.dim <= previous || dim.dim >= static_cast<int>(tensor.shape.size())) {
          report(where + " is out of order or out of range for shape " + to_string(tensor.shape));
          continue;
        }
        previous = dim.dim;
        if (dim.scale < 1 || tensor.shape[static_cast<size_t>(dim.dim)] % dim.scale != 0) {
          report(where + " has scale " + std::to_string(dim.scale) +
                 ", which does not divide "
                 "its bound " +
                 std::to_string(tensor.shape[static_cast<size_t>(dim.dim)]));
        }
        if (!valid_tensor(dim.extent) || ops_.tensor(dim.extent).dtype != DType::kInt64 ||
            !ops_.tensor(dim.extent).shape.empty()) {
          report(where + " takes its extent from " + tensor_name(dim.extent) +
                 ", which is not an int64 scalar");
        }
      }
    }
  }

  // A label count is a float32 scalar input counting entries of an int64 input.
  void check_label_counts() {
    for (TensorId id = 0; id < ops_.num_tensors(); ++id) {
      const Tensor& tensor = ops_.tensor(id);
      const TensorId labels = tensor.label_count.labels;
      if (labels < 0) continue;
      if (tensor.role != Role::kInput || tensor.dtype != DType::kFloat32 || !tensor.shape.empty()) {
        report("tensor " + tensor.name + " counts labels but is not a float32 scalar input");
      }
      if (!valid_tensor(labels) || ops_.tensor(labels).role != Role::kInput ||
          ops_.tensor(labels).dtype != DType::kInt64 || ops_.tensor(labels).shape.empty()) {
        report("tensor " + tensor.name + " counts the entries of " + tensor_name(labels) +
               ", which is not an int64 batch input");
      }
    }
  }

  void check_tasks() {
    for (TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const Task& task = graph_.task(id);
      if (task.devices.empty()) report(describe(id) + " has no devices");
      DeviceSet seen;
      for (int device : task.devices) {
        if (device < 0) report(describe(id) + " lists device " + std::to_string(device));
        if (!seen.insert(device).second) {
          report(describe(id) + " lists device " + std::to_string(device) + " twice");
        }
      }
      if (task.stream.empty()) report(describe(id) + " has no stream");
      for (OpId op : task.ops) {
        if (!valid_op(op)) {
          report(describe(id) + " lists op " + std::to_string(op) + ", which does not exist");
        }
      }
      for (TensorId tensor : task.tensors) {
        if (!valid_tensor(tensor)) {
          report(describe(id) + " moves tensor id " + std::to_string(tensor) +
                 ", which does not exist");
        }
      }
    }
  }

  void check_edges() {
    data_predecessors_.assign(graph_.num_tasks(), {});
    const auto& edges = graph_.edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!valid_task(edge.from) || !valid_task(edge.to)) {
        report("edge " + std::to_string(i) + " (" + std::to_string(edge.from) + " -> " +
               std::to_string(edge.to) + ") names task " +
               std::to_string(valid_task(edge.from) ? edge.to : edge.from) +
               ", which does not exist");
        continue;
      }
      if (edge.kind == EdgeKind::kData) {
        data_predecessors_[edge.to].push_back(edge.from);
      } else if (!nested(device_set(edge.from), device_set(edge.to))) {
        report("temporal edge from " + describe(edge.from) + " on devices " +
               devices_text(device_set(edge.from)) + " to " + describe(edge.to) + " on devices " +
               devices_text(device_set(edge.to)) + " crosses devices");
      }
    }
  }

  // A temporal edge holds on the devices both tasks run on: one set must
  // include the other (a replicated task before one replica's transfer).
  static bool nested(const DeviceSet& a, const DeviceSet& b) {
    return std::includes(a.begin(), a.end(), b.begin(), b.end()) ||
           std::includes(b.begin(), b.end(), a.begin(), a.end());
  }

  DeviceSet device_set(TaskId id) const {
    const auto& devices = graph_.task(id).devices;
    return DeviceSet(devices.begin(), devices.end());
  }

  // Kahn's algorithm over every edge; what remains holds a cycle, which is
  // reported by walking back along predecessors that remain until one repeats.
  void check_acyclic() {
    const int n = graph_.num_tasks();
    std::vector<int> indegree(n, 0);
    std::vector<std::vector<TaskId>> successors(n);
    std::vector<std::vector<TaskId>> predecessors(n);
    for (const Edge& edge : graph_.edges()) {
      if (!valid_task(edge.from) || !valid_task(edge.to)) continue;
      successors[edge.from].push_back(edge.to);
      predecessors[edge.to].push_back(edge.from);
      ++indegree[edge.to];
    }
    std::vector<TaskId> ready;
    for (TaskId id = 0; id < n; ++id) {
      if (indegree[id] == 0) ready.push_back(id);
    }
    while (!ready.empty()) {
      const TaskId id = ready.back();
      ready.pop_back();
      for (TaskId next : successors[id]) {
        if (--indegree[next] == 0) ready.push_back(next);
      }
    }
    const auto start = std::find_if(indegree.begin(), indegree.end(), [](int d) { return d > 0; });
    if (start == indegree.end()) return;
    // Every remaining task has a remaining predecessor, so walking back must repeat.
    std::vector<TaskId> walk = {static_cast<TaskId>(start - indegree.begin())};
    std::map<TaskId, size_t> position = {{walk.back(), 0}};
    while (true) {
      const auto& preds = predecessors[walk.back()];
      const TaskId back =
          *std::find_if(preds.begin(), preds.end(), [&](TaskId p) { return indegree[p] > 0; });
      if (position.count(back)) {
        std::vector<TaskId> cycle(walk.begin() + position[back], walk.end());
        std::reverse(cycle.begin(), cycle.end());
        std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
        std::string text;
        for (TaskId id : cycle) text += describe(id) + " -> ";
        report("the task DAG has a cycle: " + text + describe(cycle.front()));
        return;
      }
      position[back] = walk.size();
      walk.push_back(back);
    }
  }

  void check_op_assignment() {
    std::map<std::pair<OpId, int>, TaskId> owner;
    for (TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const Task& task = graph_.task(id);
      for (OpId op : task.ops) {
        if (!valid_op(op)) continue;
        const auto [found, inserted] = owner.emplace(std::make_pair(op, task.microbatch), id);
        if (!inserted && found->second != id) {
          report(describe_op(op) + " is in both " + describe(found->second) + " and " +
                 describe(id) + " for mb " + std::to_string(task.microbatch));
        } else if (!inserted) {
          report(describe(id) + " lists " + describe_op(op) + " twice");
        }
      }
    }
  }

  // Whether `source`, a data-edge predecessor of a task in microbatch `mb`, provides `tensor`
  // on its devices.
  bool provides(TaskId source, TensorId tensor, int mb) const {
    const Task& task = graph_.task(source);
    if (is_per_microbatch(ops_, tensor) && task.microbatch != mb) return false;
    if (task.kind == TaskKind::kCompute) {
      return producer_[tensor] >= 0 && contains(task.ops, producer_[tensor]);
    }
    // A recv brings the tensor; a collective leaves its result on its devices.
    return task.kind != TaskKind::kSend && contains(task.tensors, tensor);
  }

  // Sets marks[device] to `mark`; false if it held it already. Negative devices (reported by
  // check_tasks) are never marked.
  static bool mark_device(int device, std::vector<uint64_t>& marks, uint64_t mark) {
    if (device < 0) return false;
    if (static_cast<size_t>(device) >= marks.size()) marks.resize(static_cast<size_t>(device) + 1);
    if (marks[device] == mark) return false;
    marks[device] = mark;
    return true;
  }

  // The tensors task `id` reads that none of its own earlier ops write.
  void check_inputs(TaskId id) {
    const Task& task = graph_.task(id);
    const DeviceSet devices = device_set(id);
    ++task_mark_;
    for (int device : task.devices) mark_device(device, task_of_device_, task_mark_);
    std::set<TensorId> written;
    std::set<TensorId> checked;
    for (OpId op : task.ops) {
      if (!valid_op(op)) continue;
      for (TensorId tensor : ops_.op(op).inputs) {
        if (!valid_tensor(tensor) || written.count(tensor) || !checked.insert(tensor).second) {
          continue;
        }
        check_input(id, devices, tensor);
      }
      for (TensorId tensor : ops_.op(op).outputs) written.insert(tensor);
    }
  }

  void check_input(TaskId id, const DeviceSet& devices, TensorId tensor) {
    const Task& task = graph_.task(id);
    const OpId producer = producer_[tensor];
    if (producer < 0 && is_always_available(ops_.tensor(tensor).role)) return;
    // Each device of a replicated task may get the tensor from its own source
    // (replica i's recv): the devices the sources provide it on must cover the task's. One pass
    // over the sources, not one per device: a stage replicated n ways has n recvs. The devices
    // are counted by marks (check_inputs marked the task's), not collected in sets: a compute
    // task of a large data-parallel job has hundreds of devices and of sources.
    ++provided_mark_;
    size_t covered = 0;
    for (TaskId source : data_predecessors_[id]) {
      if (!provides(source, tensor, task.microbatch)) continue;
      for (int device : graph_.task(source).devices) {
        if (device >= 0 && static_cast<size_t>(device) < task_of_device_.size() &&
            task_of_device_[device] == task_mark_ &&
            mark_device(device, provided_on_device_, provided_mark_)) {
          ++covered;
        }
      }
    }
    if (covered == devices.size()) return;
    const std::string reads = describe(id) + " on devices " + devices_text(devices) + " reads '" +
                              tensor_name(tensor) + "'";
    if (contains(task.ops, producer)) {
      report(reads + " before " + describe_op(producer) + " of the same task writes it");
      return;
    }
    std::string where;
    for (TaskId other = 0; other < graph_.num_tasks(); ++other) {
      const Task& candidate = graph_.task(other);
      const bool same_mb =
          !is_per_microbatch(ops_, tensor) || candidate.microbatch == task.microbatch;
      if (producer >= 0 && candidate.kind == TaskKind::kCompute && same_mb &&
          contains(candidate.ops, producer)) {
        where += (where.empty() ? "; it is written by " : " and by ") + describe(other) +
                 " on devices " + devices_text(device_set(other));
      }
    }
    if (where.empty()) {
      where = producer < 0 ? "; no op writes it" : "; no task runs " + describe_op(producer);
    }
    report(reads + " that no task joined to it by a data edge writes or receives there" + where);
  }

  // Send on device a to peer b of tensors T in mb m for replica r <=> exactly one recv on
  // b from peer a of T in m for r, joined to it by a data edge. Transfers meet through a
  // hash of that key, so the check is linear in the number of transfers.
  void check_sends_and_recvs() {
    std::unordered_map<TransferKey, Matches, TransferKeyHash> transfers;
    std::vector<TaskId> sends;
    std::vector<TaskId> recvs;
    for (TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const Task& task = graph_.task(id);
      if (task.kind != TaskKind::kSend && task.kind != TaskKind::kRecv) continue;
      if (task.devices.size() != 1 || task.peer < 0) {
        report(describe(id) + " must list one device and a peer, but lists devices " +
               devices_text(device_set(id)) + " and peer " + std::to_string(task.peer));
        continue;
      }
      const bool send = task.kind == TaskKind::kSend;
      TransferKey key{send ? task.devices[0] : task.peer, send ? task.peer : task.devices[0],
                      task.microbatch, task.replica, task.tensors};
      Matches& matches = transfers[std::move(key)];
      (send ? matches.sends : matches.recvs).push_back(id);
      (send ? sends : recvs).push_back(id);
    }
    // Reported in task order, sends first, as each names the other side's matches.
    std::vector<const Matches*> of_task(static_cast<size_t>(graph_.num_tasks()), nullptr);
    for (const auto& [key, matches] : transfers) {
      for (TaskId id : matches.sends) of_task[id] = &matches;
      for (TaskId id : matches.recvs) of_task[id] = &matches;
    }
    for (TaskId send : sends) {
      const std::vector<TaskId>& found = of_task[send]->recvs;
      report_matches(send, found, "recv");
      if (found.size() == 1 && !contains(data_predecessors_[found[0]], send)) {
        report("no data edge joins " + describe(send) + " to its recv " + describe(found[0]));
      }
    }
    for (TaskId recv : recvs) report_matches(recv, of_task[recv]->sends, "send");
  }

  void report_matches(TaskId id, const std::vector<TaskId>& found, const std::string& other) {
    if (found.size() == 1) return;
    const Task& task = graph_.task(id);
    std::string tensors;
    for (TensorId tensor : task.tensors) {
      tensors += (tensors.empty() ? "'" : ", '") + tensor_name(tensor) + "'";
    }
    std::string text = describe(id) + " of [" + tensors + "] on device " +
                       std::to_string(task.devices[0]) + " with peer " + std::to_string(task.peer) +
                       " has ";
    if (found.empty()) {
      report(text + "no matching " + other);
      return;
    }
    text += std::to_string(found.size()) + " matching " + other + "s: ";
    for (size_t i = 0; i < found.size(); ++i) text += (i ? ", " : "") + describe(found[i]);
    report(text);
  }

  // Tasks with the same kind, tensors, microbatch and stream form one
  // collective; they must agree on its device set.
  // With tensor parallelism, every op reads its inputs placed as its rule needs them (a
  // reshard goes before it otherwise) and writes what the rule gives. ZeRO's flat slices and
  // the norm's per-rank sum of squares have no block structure to check.
  //
  // Under expert parallelism (OpGraph::replica_group) the group is each task's replicas, an op
  // that meets no tensor placed over them runs on its replica's own rows, and one that does
  // reads a tensor of the replicas' own as the rows it is (Tensor::replica_placement). With
  // tensor parallelism too, each group is checked apart: over a tensor-parallel group the
  // tensors split over the replicas are whole, and so are the expert-parallel reshards.
  void check_placements() {
    if (!graph_.shard_groups.empty()) {
      check_placements_over(static_cast<int64_t>(graph_.shard_groups.front().size()), false);
    }
    if (ops_.replica_group > 0) check_placements_over(ops_.replica_group, true);
  }

  void check_placements_over(int64_t parts, bool over_replicas) {
    const auto placed = [&](TensorId t) {
      const Tensor& tensor = ops_.tensor(t);
      if (over_replicas) {
        return tensor.placed_over_replicas ? tensor.placement : tensor.replica_placement;
      }
      return tensor.placed_over_replicas ? Placement{} : tensor.placement;
    };
    std::vector<Shape> whole;
    for (TensorId t = 0; t < ops_.num_tensors(); ++t) {
      const Tensor& tensor = ops_.tensor(t);
      // ZeRO's flat slices keep the placement of what they slice, not its rank.
      const bool blocked = tensor.placement.dim < static_cast<int>(tensor.shape.size());
      whole.push_back(blocked ? whole_shape(tensor.shape, placed(t), parts) : tensor.shape);
    }
    for (OpId id = 0; id < ops_.num_ops(); ++id) {
      const Op& op = ops_.op(id);
      if (op.type == "piper.SumSquares" || touches_flat_slices(op)) continue;
      if (over_replicas && runs_on_own_rows(op)) continue;
      std::vector<Placement> given;
      for (TensorId in : op.inputs) given.push_back(in >= 0 ? placed(in) : Placement{});
      const OpPlacement needed = !over_replicas && reshards_over_replicas(op)
                                     ? OpPlacement{std::vector<Placement>(op.inputs.size()),
                                                   std::vector<Placement>(op.outputs.size())}
                                     : place_op(ops_, op, given, whole, parts);
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        if (op.inputs[i] < 0 || given[i] == needed.inputs[i]) continue;
        report(describe_op(id) + " reads '" + ops_.tensor(op.inputs[i]).name + "' placed " +
               to_string(given[i]) + " but needs it " + to_string(needed.inputs[i]) +
               "; a reshard must come first");
      }
      for (size_t j = 0; j < op.outputs.size(); ++j) {
        if (op.outputs[j] < 0) continue;
        const Placement written = placed(op.outputs[j]);
        if (written == needed.outputs[j]) continue;
        report(describe_op(id) + " writes '" + ops_.tensor(op.outputs[j]).name + "' as " +
               to_string(needed.outputs[j]) + " but it is placed " + to_string(written));
      }
    }
  }

  bool runs_on_own_rows(const Op& op) const {
    const auto own = [&](TensorId t) { return t < 0 || !ops_.tensor(t).placed_over_replicas; };
    return std::all_of(op.inputs.begin(), op.inputs.end(), own) &&
           std::all_of(op.outputs.begin(), op.outputs.end(), own);
  }

  // ZeRO's flat slices: loaded or accumulated ones (shard_of), those a data-parallel piper.Shard
  // cuts, and optimizer state reshaped to a slice (its placement's dimension is past its rank).
  bool touches_flat_slices(const Op& op) const {
    const auto flat = [&](TensorId t) {
      if (!valid_tensor(t)) return false;
      const Tensor& tensor = ops_.tensor(t);
      if (tensor.shard_of >= 0 || tensor.placement.dim >= static_cast<int>(tensor.shape.size())) {
        return true;
      }
      const OpId producer = producer_[t];
      return producer >= 0 && ops_.op(producer).type == "piper.Shard" &&
             attr_string(ops_.op(producer).attributes, "group", "") != "tensor";
    };
    return std::any_of(op.inputs.begin(), op.inputs.end(), flat) ||
           std::any_of(op.outputs.begin(), op.outputs.end(), flat) ||
           (op.type == "piper.Shard" && attr_string(op.attributes, "group", "") != "tensor");
  }

  void check_collectives() {
    using Key = std::tuple<TaskKind, std::vector<TensorId>, int, std::string>;
    std::map<Key, TaskId> first;
    for (TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const Task& task = graph_.task(id);
      if (!is_collective(task.kind)) continue;
      const auto [found, inserted] =
          first.emplace(Key(task.kind, task.tensors, task.microbatch, task.stream), id);
      if (!inserted && device_set(found->second) != device_set(id)) {
        report("the " + to_string(task.kind) + " of " + describe(found->second) + " on devices " +
               devices_text(device_set(found->second)) + " and " + describe(id) + " on devices " +
               devices_text(device_set(id)) + " disagree on its devices");
      }
    }
  }

  const TaskGraph& graph_;
  const OpGraph& ops_;
  std::vector<OpId> producer_;
  std::vector<std::vector<TaskId>> data_predecessors_;
  // check_inputs' marks, by device: the task being checked runs there (task_of_device_ holds
  // task_mark_), the tensor being checked is provided there (provided_on_device_ holds
  // provided_mark_).
  std::vector<uint64_t> task_of_device_;
  std::vector<uint64_t> provided_on_device_;
  uint64_t task_mark_ = 0;
  uint64_t provided_mark_ = 0;
  std::vector<std::string> messages_;
};

}  // namespace

std::vector<std::string> verify(const TaskGraph& graph) { return Verifier(graph).run(); }

void verify_or_throw(const TaskGraph& graph, const std::string& after) {
  const std::vector<std::string> messages = verify(graph);
  if (messages.empty()) return;
  std::string text = after + ": ";
  for (size_t i = 0; i < messages.size(); ++i) text += (i ? "; " : "") + messages[i];
  throw std::logic_error(text);
}

}  // namespace piper::ir
