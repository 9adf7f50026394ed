#include "planner/gradient_norm.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace piper::planner {
namespace {

bool is_update(const ir::Op& op) {
  return op.pass == ir::Pass::kUpdate && (op.type == "piper.SGD" || op.type == "piper.AdamW");
}

// Elements [start, start + count) of a gradient that one device adds to the norm.
struct Share {
  ir::TensorId gradient = -1;
  int64_t start = 0;
  int64_t count = 0;
};

class GradientNorm {
 public:
  explicit GradientNorm(ir::TaskGraph& graph) : graph_(graph), ops_(graph.op_graph()) {}

  void run() {
    collect_updates();
    if (update_tasks_.empty()) return;
    drop_windows_after_updates();
    const ir::TensorId squares = add_scalar("grad_norm/sum_squares");
    const ir::TensorId norm = add_scalar("grad_norm");
    const int world = graph_.world_size();
    std::vector<ir::TaskId> partial_sums;
    for (int device = 0; device < world; ++device) {
      partial_sums.push_back(add_partial_sum(device, squares));
    }
    std::vector<ir::TaskId> summed = partial_sums;
    // With tensor parallelism the members of a device's group add their blocks too.
    if (world > 1 || !graph_.shard_groups.empty()) {
      ir::Task reduce;
      reduce.kind = ir::TaskKind::kAllReduce;
      reduce.pass = ir::Pass::kUpdate;
      reduce.devices = all_devices();
      reduce.tensors = {squares};
      const ir::TaskId id = graph_.add_task(std::move(reduce));
      for (ir::TaskId from : partial_sums) graph_.add_edge(from, id, ir::EdgeKind::kData);
      summed = {id};
    }
    ir::Op root;
    root.type = "Sqrt";
    root.name = "grad_norm";
    root.inputs = {squares};
    root.outputs = {norm};
    root.pass = ir::Pass::kUpdate;
    const ir::TaskId norm_task = add_compute(all_devices(), ops_.add_op(std::move(root)));
    for (ir::TaskId from : summed) graph_.add_edge(from, norm_task, ir::EdgeKind::kData);
    for (ir::TaskId update : update_tasks_) {
      graph_.add_edge(norm_task, update, ir::EdgeKind::kData);
    }
    for (ir::OpId op : update_ops_) ops_.op(op).inputs.push_back(norm);
    ops_.grad_norm = norm;
  }

 private:
  // The gradient an update op applies, before ZeRO-1's piper.Shard takes this replica's slice
  // of it inside the update's task (the whole gradient is what that task waits for). A
  // tensor-parallel piper.Shard writes the gradient itself (a member's block of it).
  ir::TensorId applied_gradient(const ir::Op& update) const {
    ir::TensorId gradient = update.inputs.at(1);
    const ir::OpId producer = ops_.producer(gradient);
    if (producer >= 0 && ops_.op(producer).type == "piper.Shard" &&
        ir::attr_string(ops_.op(producer).attributes, "group", "") != "tensor") {
      gradient = ops_.op(producer).inputs.at(0);
    }
    for (const ir::TrainedParameter& trained : ops_.trained) {
      if (trained.gradient == gradient) return gradient;
    }
    throw std::logic_error("the gradient norm: update op '" + update.name + "' applies '" +
                           ops_.tensor(gradient).name + "', the gradient of no trained parameter");
  }

  void collect_updates() {
    std::set<ir::OpId> seen;
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const ir::Task& task = graph_.task(id);
      if (task.kind != ir::TaskKind::kCompute) continue;
      bool updates = false;
      for (ir::OpId op : task.ops) {
        if (!is_update(ops_.op(op))) continue;
        if (!seen.insert(op).second) {
          throw std::logic_error("the gradient norm: update op '" + ops_.op(op).name +
                                 "' is in more than one task");
        }
        updates = true;
        update_ops_.push_back(op);
        add_shares(task.devices, applied_gradient(ops_.op(op)));
      }
      if (updates) update_tasks_.push_back(id);
    }
    for (const ir::Edge& edge : graph_.edges()) {
      if (edge.kind != ir::EdgeKind::kData) continue;
      if (std::find(update_tasks_.begin(), update_tasks_.end(), edge.to) == update_tasks_.end()) {
        continue;
      }
      const std::vector<int>& from = graph_.task(edge.from).devices;
      for (int device : graph_.task(edge.to).devices) {
        // A replica's own recv feeds only that replica.
        if (std::find(from.begin(), from.end(), device) != from.end()) {
          waits_[device].insert(edge.from);
        }
      }
    }
  }

  // Window edges were read off the task order of their time, in which an update could run
  // before a later layer's backward (ZeRO-3's gather prefetch); every update now waits for
  // every gradient, so those edges would close a cycle and go.
  void drop_windows_after_updates() {
    std::vector<bool> drop(graph_.edges().size(), false);
    for (size_t i = 0; i < drop.size(); ++i) {
      const ir::Edge& edge = graph_.edges()[i];
      drop[i] =
          edge.kind == ir::EdgeKind::kWindow && graph_.task(edge.to).pass != ir::Pass::kUpdate &&
          std::find(update_tasks_.begin(), update_tasks_.end(), edge.from) != update_tasks_.end();
    }
    graph_.remove_edges(drop);
  }

  // A shard is its replica's own; a gradient the replicas hold alike is cut into one slice
  // per replica, so that each element is counted once and the work is spread.
  void add_shares(const std::vector<int>& devices, ir::TensorId gradient) {
    const int64_t n = ir::num_elements(ops_.tensor(gradient).shape);
    // A ZeRO shard or an expert block (split over the replicas) is the replica's own.
    const bool sharded =
        ops_.tensor(gradient).shard_of >= 0 || ops_.tensor(gradient).placed_over_replicas;
    const auto replicas = static_cast<int64_t>(devices.size());
    const int64_t slice = sharded ? n : (n + replicas - 1) / replicas;
    for (int64_t k = 0; k < replicas; ++k) {
      const int64_t start = sharded ? 0 : std::min(k * slice, n);
      shares_[devices[k]].push_back({gradient, start, std::min(slice, n - start)});
    }
  }

  ir::TaskId add_partial_sum(int device, ir::TensorId squares) {
    ir::Op sum;
    sum.type = "piper.SumSquares";
    sum.name = "grad_norm/sum_squares/device" + std::to_string(device);
    sum.outputs = {squares};
    sum.pass = ir::Pass::kUpdate;
    std::vector<int64_t> starts, counts;
    for (const Share& share : shares_[device]) {
      sum.inputs.push_back(share.gradient);
      starts.push_back(share.start);
      counts.push_back(share.count);
    }
    sum.attributes = {{"starts", starts}, {"counts", counts}};
    const ir::TaskId id = add_compute({device}, ops_.add_op(std::move(sum)));
    for (ir::TaskId from : waits_[device]) graph_.add_edge(from, id, ir::EdgeKind::kData);
    return id;
  }

  ir::TaskId add_compute(std::vector<int> devices, ir::OpId op) {
    ir::Task task;
    task.pass = ir::Pass::kUpdate;
    task.devices = std::move(devices);
    task.ops = {op};
    return graph_.add_task(std::move(task));
  }

  ir::TensorId add_scalar(const std::string& name) {
    ir::Tensor tensor;
    tensor.name = name;
    return ops_.add_tensor(std::move(tensor));
  }

  std::vector<int> all_devices() const {
    std::vector<int> devices(static_cast<size_t>(graph_.world_size()));
    for (size_t d = 0; d < devices.size(); ++d) devices[d] = static_cast<int>(d);
    return devices;
  }

  ir::TaskGraph& graph_;
  ir::OpGraph& ops_;
  std::vector<ir::TaskId> update_tasks_;
  std::vector<ir::OpId> update_ops_;
  std::map<int, std::vector<Share>> shares_;   // by device
  std::map<int, std::set<ir::TaskId>> waits_;  // by device: what its updates wait for
};

}  // namespace

void add_gradient_norm(ir::TaskGraph& graph) { GradientNorm(graph).run(); }

}  // namespace piper::planner
