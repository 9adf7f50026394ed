#include "planner/directives/transfers.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "formats/error.h"

namespace piper::planner {
namespace {

bool is_transfer(const ir::Task& task) {
  return task.kind == ir::TaskKind::kSend || task.kind == ir::TaskKind::kRecv;
}

std::string mismatch(const ir::TaskGraph& graph, ir::TaskId writer, ir::TaskId reader) {
  return graph.describe(writer) + " on " + std::to_string(graph.task(writer).devices.size()) +
         " device(s) feeds " + graph.describe(reader) + " on " +
         std::to_string(graph.task(reader).devices.size()) +
         "; tasks that exchange data need as many replicas on both sides (replicate every "
         "pipeline stage over the same number of devices)";
}

class Router {
 public:
  Router(ir::TaskGraph& graph, const DirectiveContext& context)
      : graph_(graph), ops_(graph.op_graph()), context_(context) {}

  void run() {
    std::vector<bool> drop(graph_.num_tasks());
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) drop[id] = is_transfer(graph_.task(id));
    graph_.remove_tasks(drop);
    const std::vector<ir::Edge> edges = graph_.edges();
    for (const ir::Edge& edge : edges) {
      const ir::Task& from = graph_.task(edge.from);
      const ir::Task& to = graph_.task(edge.to);
      if (edge.kind != ir::EdgeKind::kData || from.kind != ir::TaskKind::kCompute ||
          to.kind != ir::TaskKind::kCompute || from.devices == to.devices) {
        continue;
      }
      route(edge.from, edge.to);
    }
    index_parameter_use();
    for (const ir::TrainedParameter& trained : ops_.trained) sync_parameter(trained.parameter);
    deliver_loss();
  }

 private:
  // (tensor, microbatch, from device, to device) -> the send and recv moving it.
  using Key = std::tuple<ir::TensorId, int, int, int>;
  using Transfer = std::pair<ir::TaskId, ir::TaskId>;

  std::set<ir::TensorId> written_by(const ir::Task& task) const {
    std::set<ir::TensorId> written;
    for (ir::OpId op : task.ops) {
      for (ir::TensorId out : ops_.op(op).outputs) {
        if (out >= 0) written.insert(out);
      }
    }
    return written;
  }

  std::vector<ir::TensorId> moved(const ir::Task& from, const ir::Task& to) const {
    const std::set<ir::TensorId> written = written_by(from);
    std::set<ir::TensorId> read;
    for (ir::OpId op : to.ops) {
      for (ir::TensorId in : ops_.op(op).inputs) {
        if (written.count(in)) read.insert(in);
      }
    }
    // A tensor with a run-time extent is sent at its bound, and its extent with it.
    for (ir::TensorId tensor : std::set<ir::TensorId>(read)) {
      for (const ir::DynamicDim& dim : ops_.tensor(tensor).dynamic) {
        if (written.count(dim.extent)) read.insert(dim.extent);
      }
    }
    return {read.begin(), read.end()};
  }

  // Replica i of the writer feeds replica i of the reader. While a later
  // directive has yet to replicate one side (one stage replicated, the next
  // not yet), a single writer feeds every replica and of several writers the
  // first feeds a single reader; check_replica_counts refuses a plan left
  // that way.
  void route(ir::TaskId writer, ir::TaskId reader) {
    const ir::Task& from = graph_.task(writer);
    const ir::Task& to = graph_.task(reader);
    std::vector<int> sources = from.devices;
    std::vector<int> targets = to.devices;
    if (sources.size() != targets.size()) {
      if (sources.size() > 1 && targets.size() > 1) {
        throw Error(context_.where() + ": " + mismatch(graph_, writer, reader));
      }
      // One writer feeds every replica; of several writers, the first feeds.
      if (sources.size() == 1) sources.assign(targets.size(), sources[0]);
      targets.resize(sources.size() == targets.size() ? targets.size() : 1);
      sources.resize(targets.size());
    }
    for (ir::TensorId tensor : moved(from, to)) {
      if (!ir::is_per_microbatch(ops_, tensor)) {
        throw Error(context_.where() + ": '" + ops_.tensor(tensor).name +
                    "' is one tensor for all microbatches and would cross from " +
                    graph_.describe(writer) + " to " + graph_.describe(reader) +
                    "; place both tasks on the same devices");
      }
      for (size_t i = 0; i < sources.size(); ++i) {
        if (sources[i] == targets[i]) continue;
        const ir::TaskId recv =
            transfer(writer, tensor, sources[i], targets[i], static_cast<int>(i)).second;
        graph_.add_edge(recv, reader, ir::EdgeKind::kData);
      }
    }
  }

  // The send and recv moving replica `replica`'s `tensor` from `source`, after `writer`, to
  // `target`; made once per tensor instance and pair of devices.
  Transfer transfer(ir::TaskId writer, ir::TensorId tensor, int source, int target, int replica) {
    const ir::Task& from = graph_.task(writer);
    const Key key{tensor, from.microbatch, source, target};
    const auto found = transfers_.find(key);
    if (found != transfers_.end()) return found->second;
    ir::Task send;
    send.kind = ir::TaskKind::kSend;
    send.tags = from.tags;
    send.pass = from.pass;
    send.microbatch = from.microbatch;
    send.devices = {source};
    send.stream = transfer_stream(source, target);
    send.tensors = {tensor};
    send.peer = target;
    send.replica = replica;
    ir::Task recv = send;
    recv.kind = ir::TaskKind::kRecv;
    recv.devices = {target};
    recv.peer = source;
    const ir::TaskId send_id = graph_.add_task(std::move(send));
    const ir::TaskId recv_id = graph_.add_task(std::move(recv));
    graph_.add_edge(writer, send_id, ir::EdgeKind::kData);
    graph_.add_edge(send_id, recv_id, ir::EdgeKind::kData);
    return transfers_.emplace(key, Transfer{send_id, recv_id}).first->second;
  }

  // A parameter read on devices that do not update it (a tied embedding on
  // the first and last pipeline stage) is sent there after its update; the
  // gradient contributions of those devices already reached the update
  // through the routed gradient sum. The copy is overwritten only once the
  // step's readers there are done. Under ZeRO-3 the update writes a kept
  // slice (`trained`) and the whole parameter, which the other devices read,
  // is the all-gather after it (replicate adds that gather for them).
  void sync_parameter(ir::TensorId trained) {
    const ir::TensorId sliced = ops_.tensor(trained).shard_of;
    const ir::TensorId parameter = sliced >= 0 ? sliced : trained;
    // Optimizer ops update their first input in place.
    std::vector<ir::TaskId> writers;
    std::merge(updates_[trained].begin(), updates_[trained].end(), gathers_[parameter].begin(),
               gathers_[parameter].end(), std::back_inserter(writers));
    if (writers.empty()) return;
    std::map<std::vector<int>, std::vector<ir::TaskId>> readers;  // by device set
    for (ir::TaskId id : readers_[parameter]) readers[graph_.task(id).devices].push_back(id);
    const std::vector<int> owners = graph_.task(writers[0]).devices;
    for (const auto& [devices, tasks] : readers) {
      if (devices == owners) continue;
      // As in route: unequal replica counts pass only between directives.
      const size_t pairs = devices.size() == owners.size() ? devices.size() : 1;
      for (size_t i = 0; i < pairs; ++i) {
        if (devices[i] == owners[i]) continue;
        const auto [send, recv] = transfer(writers[0], parameter, owners[i], devices[i], 0);
        for (ir::TaskId writer : writers) graph_.add_edge(writer, send, ir::EdgeKind::kData);
        for (ir::TaskId reader : tasks) graph_.add_edge(reader, recv, ir::EdgeKind::kTemporal);
      }
    }
  }

  // For sync_parameter, in task order: the update tasks that read each tensor, the all-gathers
  // that write each (as the output of one of their pairs: a bucket gathers several), and the
  // other compute tasks that read each. One pass over the DAG, not one per parameter; the
  // transfers sync_parameter adds are none of these.
  void index_parameter_use() {
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const ir::Task& task = graph_.task(id);
      for (size_t i = 1; task.kind == ir::TaskKind::kAllGather && i < task.tensors.size(); i += 2) {
        gathers_[task.tensors[i]].push_back(id);
      }
      if (task.kind != ir::TaskKind::kCompute) continue;
      auto& index = task.pass == ir::Pass::kUpdate ? updates_ : readers_;
      for (ir::OpId op : task.ops) {
        for (ir::TensorId in : ops_.op(op).inputs) {
          std::vector<ir::TaskId>& tasks = index[in];
          if (tasks.empty() || tasks.back() != id) tasks.push_back(id);
        }
      }
    }
  }

  // Every rank reports the step's loss: each microbatch's loss goes to every
  // device that does not compute it (the k-th of them from the loss task's
  // replica k mod n), once every task writing it (the loss op, a replica
  // average) is done.
  void deliver_loss() {
    const ir::OpId producer = ops_.producer(ops_.loss);
    std::map<int, std::vector<ir::TaskId>> writers;  // by microbatch
    std::map<int, ir::TaskId> computes;
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const ir::Task& task = graph_.task(id);
      const bool computes_loss =
          std::find(task.ops.begin(), task.ops.end(), producer) != task.ops.end();
      const bool reduces_loss =
          task.kind == ir::TaskKind::kAllReduce &&
          std::find(task.tensors.begin(), task.tensors.end(), ops_.loss) != task.tensors.end();
      if (computes_loss) computes[task.microbatch] = id;
      if (computes_loss || reduces_loss) writers[task.microbatch].push_back(id);
    }
    const int world = graph_.world_size();
    for (const auto& [microbatch, compute] : computes) {
      const std::vector<int> devices = graph_.task(compute).devices;
      size_t lacking = 0;
      for (int device = 0; device < world; ++device) {
        if (std::find(devices.begin(), devices.end(), device) != devices.end()) continue;
        const size_t replica = lacking++ % devices.size();
        const ir::TaskId send =
            transfer(compute, ops_.loss, devices[replica], device, static_cast<int>(replica)).first;
        for (ir::TaskId writer : writers[microbatch]) {
          graph_.add_edge(writer, send, ir::EdgeKind::kData);
        }
      }
    }
  }

  ir::TaskGraph& graph_;
  const ir::OpGraph& ops_;
  const DirectiveContext& context_;
  std::map<Key, Transfer> transfers_;
  // index_parameter_use: tensor -> tasks, in task order.
  std::unordered_map<ir::TensorId, std::vector<ir::TaskId>> updates_, gathers_, readers_;
};

}  // namespace

std::string transfer_stream(int from, int to) {
  return "p2p_" + std::to_string(from) + "_to_" + std::to_string(to);
}

void route_transfers(ir::TaskGraph& graph, const DirectiveContext& context) {
  Router(graph, context).run();
}

void check_replica_counts(const ir::TaskGraph& graph, const std::string& source) {
  for (const ir::Edge& edge : graph.edges()) {
    const ir::Task& from = graph.task(edge.from);
    const ir::Task& to = graph.task(edge.to);
    if (edge.kind != ir::EdgeKind::kData || from.kind != ir::TaskKind::kCompute ||
        to.kind != ir::TaskKind::kCompute) {
      continue;
    }
    if (from.devices.size() != to.devices.size()) {
      throw Error(source + ": $.directives: after every directive, " +
                  mismatch(graph, edge.from, edge.to));
    }
  }
}

}  // namespace piper::planner
