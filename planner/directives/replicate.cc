// replicate: data parallelism. The selected tasks run on every device of the
// set, each replica on its own rows of the batch; gradients are averaged by
// bucketed all-reduce (ZeRO-0), and with sharding each replica keeps only its
// slice of the optimizer state (ZeRO-1) and of the gradients (ZeRO-2, reduce-
// scattered a bucket at a time), updates its slice of the parameters and
// all-gathers them, again a bucket at a time: every collective synchronises the
// replicas, so one per parameter would cost more than the bytes it moves. With
// sharded parameters (ZeRO-3) a replica holds only its slice between uses:
// every task that reads parameters has them all-gathered just before it and
// freed after.
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "formats/error.h"
#include "planner/directives/backward_split.h"
#include "planner/directives/directive.h"
#include "planner/directives/transfers.h"

namespace piper::planner {
namespace {

using strategy::ReplicateDirective;

// DDP's first bucket: small, so that communication starts soon after the backward does.
constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;

// The fewest buckets (after the first) a model's gradients are cut into when bucket_size would
// hold them in fewer, buckets of at least the first's size: the last bucket's all-reduce can
// only start when the backward ends, so with one bucket nothing overlaps, with eight about
// seven eighths can (bench/ddp_overlap.py hid more of it with eight than with four). A model
// whose gradients fill many buckets of bucket_size (DDP's 25 MiB) is bucketed as DDP does.
constexpr int64_t kMinBuckets = 8;

// The loss's all-reduce is for reporting only; on its own stream it neither waits behind nor
// holds back the gradients' all-reduces.
constexpr char kLossStream[] = "dp_loss";

struct Replication {
  ir::TaskGraph& graph;
  const ReplicateDirective& spec;
  const DirectiveContext& context;
  std::vector<int> devices;
  std::vector<bool> selected;      // by task id: the compute tasks replicated
  std::vector<size_t> parameters;  // trained parameters the selected tasks update

  ir::OpGraph& ops() { return graph.op_graph(); }

  // The selected tasks that run `op`.
  std::vector<ir::TaskId> tasks_running(ir::OpId op) const {
    std::vector<ir::TaskId> found;
    for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
      if (!selected[id]) continue;
      const auto& task_ops = graph.task(id).ops;
      if (std::find(task_ops.begin(), task_ops.end(), op) != task_ops.end()) found.push_back(id);
    }
    return found;
  }

  // `background`: only the update reads what the task makes (ir::Task.background).
  ir::TaskId add_comm(ir::TaskKind kind, std::vector<ir::TensorId> tensors, ir::Pass pass,
                      int microbatch, const std::string& stream, bool background) {
    ir::Task task;
    task.kind = kind;
    task.pass = pass;
    task.microbatch = microbatch;
    task.devices = devices;
    task.stream = stream;
    task.tensors = std::move(tensors);
    task.average = true;
    task.background = background;
    selected.push_back(false);
    return graph.add_task(std::move(task));
  }

  void connect(const std::vector<ir::TaskId>& from, ir::TaskId to) {
    for (ir::TaskId id : from) graph.add_edge(id, to, ir::EdgeKind::kData);
  }

  // The loss of every microbatch, averaged over replicas, is the global mean.
  void average_loss() {
    const ir::OpId producer = ops().producer(ops().loss);
    for (ir::TaskId id : tasks_running(producer)) {
      const int mb = graph.task(id).microbatch;
      const ir::TaskId reduce =
          add_comm(ir::TaskKind::kAllReduce, {ops().loss}, ir::Pass::kForward, mb, kLossStream,
                   /*background=*/true);
      graph.add_edge(id, reduce, ir::EdgeKind::kData);
    }
  }

  // Where op `op` runs in task `id`.
  size_t op_position(ir::TaskId id, ir::OpId op) const {
    const auto& task_ops = graph.task(id).ops;
    return static_cast<size_t>(std::find(task_ops.begin(), task_ops.end(), op) - task_ops.begin());
  }

  // A trained parameter and the task whose end makes its gradient final.
  struct Ready {
    size_t parameter;
    ir::TaskId task;
  };

  // Trained parameters in the order their gradients become final: by the last task that writes
  // each, then by where in that task.
  std::vector<Ready> by_readiness() {
    const std::vector<ir::TaskId> order = graph.topological_order();
    std::vector<int> position(graph.num_tasks());
    for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
    std::vector<std::tuple<int, size_t, size_t>> ready;
    for (size_t p : parameters) {
      const ir::OpId producer = ops().producer(ops().trained[p].gradient);
      std::pair<int, size_t> last{0, 0};
      for (ir::TaskId id : tasks_running(producer)) {
        last = std::max(last, {position[id], op_position(id, producer)});
      }
      ready.emplace_back(last.first, last.second, p);
    }
    std::stable_sort(ready.begin(), ready.end());
    std::vector<Ready> result;
    for (const auto& [task_position, op, p] : ready) result.push_back({p, order[task_position]});
    return result;
  }

  // A trained parameter's bytes, and its whole gradient's (also once its gradient is sharded).
  int64_t parameter_bytes(size_t p) {
    const ir::TensorId gradient = ops().trained[p].gradient;
    const ir::TensorId whole = ops().tensor(gradient).shard_of;
    return ir::num_elements(ops().tensor(whole >= 0 ? whole : gradient).shape) * 4;
  }

  // `order` (trained parameters) cut into buckets: bucket b ends before the parameter that
  // would take it past `limit(b)` bytes (a parameter larger than that has one of its own), and
  // before each i with `ends_before(i)`.
  template <typename Limit, typename EndsBefore>
  std::vector<std::vector<size_t>> cut_into_buckets(const std::vector<size_t>& order, Limit limit,
                                                    EndsBefore ends_before) {
    std::vector<std::vector<size_t>> result(1);
    int64_t bytes = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const int64_t size = parameter_bytes(order[i]);
      if (!result.back().empty() && (bytes + size > limit(result.size() - 1) || ends_before(i))) {
        result.emplace_back();
        bytes = 0;
      }
      result.back().push_back(order[i]);
      bytes += size;
    }
    if (result.back().empty()) result.pop_back();  // nothing to reduce (only expert weights)
    return result;
  }

  // Whether the backward may be cut where gradient buckets end (cut_backward_at_buckets). Not
  // with microbatches: a schedule's order groups (DualPipe's overlapped pairs) name the tasks.
  // Not under ZeRO-3 either, which gathers parameters per task.
  bool backward_may_be_cut() const {
    if (spec.shard_params) return false;
    for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
      if (selected[id] && graph.task(id).microbatch > 0) return false;
    }
    return true;
  }

  // The most bytes a bucket holds (but the first of a cut backward) where its parameters
  // total `total` bytes: the bucket size, but at most a kMinBuckets-th of them (and at least
  // 1 MiB), so that a model that one bucket would hold still overlaps all but its last bucket
  // with the backward, and the fusion buffer a stream keeps for its largest bucket (and Gloo's
  // scratch beside it) stays a small share of the memory that sharding saves.
  int64_t bucket_limit(int64_t total) const {
    return std::min(spec.bucket_size, std::max(kFirstBucketBytes, total / kMinBuckets));
  }

  // Gradients in the order they become final, cut into buckets of at most bucket_limit bytes
  // (or one gradient). Where the backward may be cut at them, the first holds at most 1 MiB, as
  // DDP's, so that its reduction starts early. Where the backward stays whole, the gradients a
  // task makes final are ready together: a bucket holds those of one task only.
  std::vector<std::vector<size_t>> buckets() {
    const std::vector<Ready> ready = by_readiness();
    std::vector<size_t> order;
    int64_t total = 0;
    for (const Ready& entry : ready) {
      order.push_back(entry.parameter);
      total += parameter_bytes(entry.parameter);
    }
    if (spec.shard_params) {
      // ZeRO-3 scatters each gradient on its own still: bucketing them moves its gathers'
      // prefetch windows (gather_parameters_before_use counts the accumulation tasks), and with
      // them the order its plan runs in, which recompute's savings were measured against.
      return cut_into_buckets(
          order, [&](size_t) { return spec.bucket_size; }, [](size_t) { return true; });
    }
    const int64_t limit = bucket_limit(total);
    if (!backward_may_be_cut()) {
      return cut_into_buckets(
          order, [&](size_t) { return limit; },
          [&](size_t i) { return i > 0 && ready[i].task != ready[i - 1].task; });
    }
    const int64_t first_limit = std::min(kFirstBucketBytes, spec.bucket_size);
    return cut_into_buckets(
        order, [&](size_t bucket) { return bucket == 0 ? first_limit : limit; },
        [](size_t) { return false; });
  }

  // A bucket's reduction waits for the tasks that write its gradients. Where one backward task
  // writes several buckets' gradients (a model without per-layer tags is one backward task), it
  // is cut after each bucket's last gradient but the last bucket's, so that the bucket's
  // reduction overlaps the rest of the backward, as DDP's gradient hooks do.
  void cut_backward_at_buckets(const std::vector<std::vector<size_t>>& buckets) {
    if (!backward_may_be_cut()) return;
    // Backward task -> bucket -> the position of that bucket's last gradient in the task.
    std::map<ir::TaskId, std::map<size_t, size_t>> ends;
    for (size_t b = 0; b < buckets.size(); ++b) {
      for (size_t p : buckets[b]) {
        const ir::OpId producer = ops().producer(ops().trained[p].gradient);
        for (ir::TaskId id : tasks_running(producer)) {
          const ir::Pass pass = graph.task(id).pass;
          if (pass != ir::Pass::kBackward && pass != ir::Pass::kBackwardWeight) continue;
          size_t& end = ends[id][b];
          end = std::max(end, op_position(id, producer));
        }
      }
    }
    for (const auto& [id, by_bucket] : ends) {
      std::set<size_t> cuts;
      for (auto it = by_bucket.begin(); std::next(it) != by_bucket.end(); ++it) {
        cuts.insert(it->second);
      }
      cuts.erase(graph.task(id).ops.size() - 1);
      if (cuts.empty()) continue;
      cut_task(graph, id, {cuts.begin(), cuts.end()});
      selected.resize(graph.num_tasks(), true);
    }
  }

  ir::OpId update_op(size_t p) {
    for (ir::OpId id = 0; id < ops().num_ops(); ++id) {
      const ir::Op& op = ops().op(id);
      if (op.pass == ir::Pass::kUpdate && op.inputs.at(0) == ops().trained[p].parameter) return id;
    }
    throw Error(context.where() + ": trained parameter '" +
                ops().tensor(ops().trained[p].parameter).name + "' has no update op");
  }

  ir::TaskId update_task(size_t p) {
    const auto tasks = tasks_running(update_op(p));
    if (tasks.size() != 1) {
      throw Error(context.where() + ": the update of '" +
                  ops().tensor(ops().trained[p].parameter).name + "' is not in exactly one task");
    }
    return tasks[0];
  }

  void all_reduce_gradients(const std::vector<std::vector<size_t>>& gradient_buckets) {
    for (const auto& bucket : gradient_buckets) {
      std::vector<ir::TensorId> gradients;
      std::vector<ir::TaskId> producers;
      for (size_t p : bucket) {
        gradients.push_back(ops().trained[p].gradient);
        for (ir::TaskId id : tasks_running(ops().producer(ops().trained[p].gradient))) {
          producers.push_back(id);
        }
      }
      int last_mb = 0;
      for (ir::TaskId id : producers) last_mb = std::max(last_mb, graph.task(id).microbatch);
      const ir::TaskId reduce = add_comm(ir::TaskKind::kAllReduce, gradients, ir::Pass::kBackward,
                                         last_mb, spec.reduce_stream, /*background=*/true);
      connect(producers, reduce);
      for (size_t p : bucket) graph.add_edge(reduce, update_task(p), ir::EdgeKind::kData);
    }
  }

  ir::TensorId add_shard_tensor(const std::string& name, int64_t elements, ir::Role role) {
    ir::Tensor tensor;
    tensor.name = name;
    tensor.shape = {elements};
    tensor.role = role;
    return ops().add_tensor(std::move(tensor));
  }

  int64_t shard_elements(ir::TensorId tensor) {
    const int64_t n = ir::num_elements(ops().tensor(tensor).shape);
    const auto d = static_cast<int64_t>(devices.size());
    return (n + d - 1) / d;
  }

  // Adds piper.Shard(source) -> a new tensor before `before` in `task`.
  ir::TensorId shard_of(ir::TensorId source, ir::TaskId task, ir::OpId before) {
    const ir::TensorId shard = add_shard_tensor(ops().tensor(source).name + "/shard",
                                                shard_elements(source), ir::Role::kActivation);
    ir::Op op;
    op.type = "piper.Shard";
    op.name = ops().tensor(shard).name;
    op.inputs = {source};
    op.outputs = {shard};
    op.attributes = {{"num_shards", static_cast<int64_t>(devices.size())}};
    op.pass = ir::Pass::kUpdate;
    op.tags = ops().op(before).tags;
    const ir::OpId id = ops().add_op(std::move(op));
    auto& task_ops = graph.task(task).ops;
    task_ops.insert(std::find(task_ops.begin(), task_ops.end(), before), id);
    return shard;
  }

  // Each replica updates its slice of every parameter with its slice of the
  // optimizer state. Without ZeRO-3 the slices are then all-gathered into the
  // parameter; with it the slice is the parameter this replica keeps, and is
  // gathered whole only for tasks elsewhere that read it.
  void shard_updates(const std::map<size_t, ir::TensorId>& gradient_shards) {
    const std::set<ir::TensorId> read_elsewhere = read_by_other_tasks();
    std::vector<Gathered> gathered;
    for (size_t p : parameters) {
      ir::TrainedParameter& trained = ops().trained[p];
      const ir::OpId update = update_op(p);
      const ir::TaskId task = update_task(p);
      const ir::TensorId parameter_shard = spec.shard_params
                                               ? kept_shard(trained.parameter)
                                               : shard_of(trained.parameter, task, update);
      const auto found = gradient_shards.find(p);
      const ir::TensorId gradient_shard =
          found != gradient_shards.end() ? found->second : shard_of(trained.gradient, task, update);
      for (ir::TensorId state : trained.state) {
        ops().tensor(state).shape = {shard_elements(trained.parameter)};
      }
      ir::Op& op = ops().op(update);
      op.inputs[0] = parameter_shard;
      op.inputs[1] = gradient_shard;
      const ir::TensorId whole = trained.parameter;
      if (spec.shard_params) trained.parameter = parameter_shard;
      if (!spec.shard_params || read_elsewhere.count(whole)) {
        gathered.push_back({p, parameter_shard, whole, task});
      }
    }
    gather_after_updates(gathered);
  }

  // A parameter all-gathered from its updated slices.
  struct Gathered {
    size_t parameter;
    ir::TensorId shard, whole;
    ir::TaskId update;
  };

  // All-gathers the updated slices into the whole parameters, a bucket of at most
  // bucket_limit bytes at a time, each after every update of its parameters. The gather stream runs
  // its gathers in the order they are added: the parameters that the forward reads first come
  // first.
  void gather_after_updates(std::vector<Gathered> gathered) {
    const std::map<ir::TensorId, std::pair<size_t, size_t>> first = first_reads();
    const std::pair<size_t, size_t> unread{std::numeric_limits<size_t>::max(), 0};
    const auto read_at = [&](const Gathered& parameter) {
      const auto found = first.find(parameter.whole);
      return found != first.end() ? found->second : unread;
    };
    std::stable_sort(gathered.begin(), gathered.end(),
                     [&](const Gathered& a, const Gathered& b) { return read_at(a) < read_at(b); });
    std::vector<size_t> order;
    int64_t total = 0;
    for (const Gathered& parameter : gathered) {
      order.push_back(parameter.parameter);
      total += parameter_bytes(parameter.parameter);
    }
    const int64_t limit = bucket_limit(total);
    const auto buckets = cut_into_buckets(
        order, [&](size_t) { return limit; }, [](size_t) { return false; });
    auto next = gathered.begin();  // buckets are consecutive runs of `order`
    for (const auto& bucket : buckets) {
      const auto end = next + static_cast<std::ptrdiff_t>(bucket.size());
      std::vector<ir::TensorId> pairs;
      for (auto parameter = next; parameter != end; ++parameter) {
        pairs.push_back(parameter->shard);
        pairs.push_back(parameter->whole);
      }
      const ir::TaskId gather =
          add_comm(ir::TaskKind::kAllGather, pairs, ir::Pass::kUpdate, 0, spec.gather_stream,
                   /*background=*/false);
      for (; next != end; ++next) graph.add_edge(next->update, gather, ir::EdgeKind::kData);
    }
  }

  // Where compute tasks first read each tensor: the position in task order of the first task
  // that reads it, and of the op in that task.
  std::map<ir::TensorId, std::pair<size_t, size_t>> first_reads() const {
    std::map<ir::TensorId, std::pair<size_t, size_t>> first;
    const std::vector<ir::TaskId> order = graph.topological_order();
    for (size_t i = 0; i < order.size(); ++i) {
      const ir::Task& task = graph.task(order[i]);
      if (task.kind != ir::TaskKind::kCompute) continue;
      for (size_t j = 0; j < task.ops.size(); ++j) {
        for (ir::TensorId input : graph.op_graph().op(task.ops[j]).inputs) {
          first.emplace(input, std::pair{i, j});
        }
      }
    }
    return first;
  }

  // What compute tasks this directive does not replicate read: a tied
  // embedding read on another pipeline stage, say. Under ZeRO-3 those tasks
  // keep reading the whole parameter, so the replicas still rebuild it after
  // each update for route_transfers to send there; otherwise they would
  // train on its initial value.
  std::set<ir::TensorId> read_by_other_tasks() {
    std::set<ir::TensorId> read;
    for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
      const ir::Task& task = graph.task(id);
      if (selected[id] || task.kind != ir::TaskKind::kCompute) continue;
      for (ir::OpId op : task.ops) {
        const auto& inputs = ops().op(op).inputs;
        read.insert(inputs.begin(), inputs.end());
      }
    }
    return read;
  }

  // ZeRO-3: the parameter's slice a replica loads and keeps.
  ir::TensorId kept_shard(ir::TensorId parameter) {
    const ir::TensorId shard = add_shard_tensor(ops().tensor(parameter).name + "/shard",
                                                shard_elements(parameter), ir::Role::kParameter);
    ops().tensor(shard).initializer = ops().tensor(parameter).initializer;
    ops().tensor(shard).shard_of = parameter;
    return shard;
  }

  // ZeRO-3: every task that reads trained parameters reads gathered copies of
  // them instead, one per task and microbatch, all-gathered from the shards
  // on the gather stream just before the task. Tasks that run the same ops
  // (the microbatches of one task) share the gathered tensors' names.
  void gather_parameters_before_use() {
    std::map<ir::TensorId, ir::TensorId> shards;  // whole parameter -> kept shard
    for (size_t p : parameters) {
      const ir::TensorId shard = ops().trained[p].parameter;
      shards[ops().tensor(shard).shard_of] = shard;
    }
    std::map<std::vector<ir::OpId>, std::vector<ir::TensorId>> gathered_by_ops;
    const std::vector<ir::TaskId> compute_order = compute_tasks_in_order();
    for (size_t k = 0; k < compute_order.size(); ++k) {
      const ir::TaskId id = compute_order[k];
      const ir::Task task = graph.task(id);
      auto found = gathered_by_ops.find(task.ops);
      if (found == gathered_by_ops.end()) {
        found = gathered_by_ops.emplace(task.ops, rename_parameters(task, shards)).first;
      }
      if (found->second.empty()) continue;
      const ir::TaskId gather = add_comm(ir::TaskKind::kAllGather, found->second, task.pass,
                                         task.microbatch, spec.gather_stream,
                                         /*background=*/false);
      graph.add_edge(gather, id, ir::EdgeKind::kData);
      // Prefetch one task ahead: the gather for this task may run alongside
      // the previous one, but not earlier, so at most two tasks' parameters
      // are gathered at a time.
      if (k >= 2) graph.add_edge(compute_order[k - 2], gather, ir::EdgeKind::kWindow);
    }
  }

  // Makes the ops of `task` read a gathered copy of each sharded parameter
  // they read; returns the all-gather's (shard, gathered) tensor pairs.
  std::vector<ir::TensorId> rename_parameters(const ir::Task& task,
                                              const std::map<ir::TensorId, ir::TensorId>& shards) {
    std::map<ir::TensorId, ir::TensorId> gathered;
    std::vector<ir::TensorId> pairs;
    for (ir::OpId op : task.ops) {
      for (ir::TensorId& input : ops().op(op).inputs) {
        const auto shard = shards.find(input);
        if (shard == shards.end()) continue;
        auto copy = gathered.find(input);
        if (copy == gathered.end()) {
          ir::Tensor tensor = ops().tensor(input);
          tensor.name += "/gathered/" + ir::to_string(task.pass);
          for (const auto& [tag, value] : task.tags)
            tensor.name += "/" + tag + std::to_string(value);
          // Another task of the same pass and tags (a recompute task) gathers too.
          const std::string base = tensor.name;
          for (int copies = 2; ops().find_tensor(tensor.name); ++copies) {
            tensor.name = base + "/" + std::to_string(copies);
          }
          tensor.role = ir::Role::kActivation;
          tensor.initializer.clear();
          copy = gathered.emplace(input, ops().add_tensor(std::move(tensor))).first;
          pairs.push_back(shard->second);
          pairs.push_back(copy->second);
        }
        input = copy->second;
      }
    }
    return pairs;
  }

  // The selected tasks in the order they run.
  std::vector<ir::TaskId> compute_tasks_in_order() const {
    std::vector<ir::TaskId> order;
    for (ir::TaskId id : graph.topological_order()) {
      if (selected[id]) order.push_back(id);
    }
    return order;
  }

  // A gradient that replicas reduce-scatter, each keeping its slice.
  struct Scattered {
    size_t parameter;
    ir::TensorId partial;        // a microbatch's gradient, or the gradient itself
    ir::TensorId partial_shard;  // this replica's slice of `partial`'s sum
    ir::OpId accumulate;         // adds partial_shard into the kept slice; -1 without microbatches
  };

  // Makes parameter p's gradient this replica's slice of it, its microbatches' slices
  // accumulated into it, and returns what to reduce-scatter.
  Scattered shard_gradient(size_t p) {
    ir::TrainedParameter& trained = ops().trained[p];
    const ir::TensorId gradient = trained.gradient;
    const ir::OpId writer = ops().producer(gradient);
    const bool accumulated = ops().tensor(gradient).accumulated;
    // The per-microbatch gradient: the Accumulate op's input, or the gradient itself.
    const ir::TensorId partial = accumulated ? ops().op(writer).inputs[0] : gradient;
    if (!accumulated) ops().tensor(gradient).role = ir::Role::kActivation;
    const std::string name = ops().tensor(gradient).name;
    const ir::TensorId shard =
        add_shard_tensor(name + "/shard", shard_elements(gradient), ir::Role::kGradient);
    ops().tensor(shard).shard_of = gradient;
    trained.gradient = shard;
    if (!accumulated) return {p, partial, shard, -1};
    const ir::TensorId partial_shard = add_shard_tensor(
        name + "/microbatch/shard", shard_elements(gradient), ir::Role::kActivation);
    ir::Op& accumulate = ops().op(writer);
    accumulate.inputs = {partial_shard};
    accumulate.outputs = {shard};
    ops().tensor(shard).accumulated = true;
    ops().tensor(gradient).accumulated = false;
    return {p, partial, partial_shard, writer};
  }

  // ZeRO-2: every microbatch's gradients are reduce-scattered a bucket at a time, as soon as
  // the bucket's are computed, and this replica's slices accumulate; no replica holds a whole
  // gradient past its backward.
  std::map<size_t, ir::TensorId> reduce_scatter_gradients(
      const std::vector<std::vector<size_t>>& gradient_buckets) {
    const std::vector<ir::TaskId> compute_order = compute_tasks_in_order();
    std::map<size_t, ir::TensorId> shards;
    // In the order the gradients become final: the reduce stream runs its scatters in the
    // order they are added, and one that waits for the end of the backward would hold back
    // every scatter after it.
    for (const auto& bucket : gradient_buckets) {
      std::vector<Scattered> gradients;
      for (size_t p : bucket) {
        gradients.push_back(shard_gradient(p));
        shards[p] = ops().trained[p].gradient;
      }
      // The tasks of each microbatch that write the bucket's gradients.
      std::map<int, std::vector<ir::TaskId>> writers;
      for (const Scattered& gradient : gradients) {
        for (ir::TaskId id : tasks_running(ops().producer(gradient.partial))) {
          writers[graph.task(id).microbatch].push_back(id);
        }
      }
      for (const auto& [microbatch, tasks] : writers) {
        scatter_bucket(gradients, tasks, compute_order);
      }
    }
    return shards;
  }

  // One reduce-scatter of `gradients` after `writers`, the tasks of one microbatch that write
  // them; the updates of gradients accumulated over microbatches wait for the accumulation
  // after it, the others for the scatter.
  void scatter_bucket(const std::vector<Scattered>& gradients,
                      const std::vector<ir::TaskId>& writers,
                      const std::vector<ir::TaskId>& compute_order) {
    // The writer that runs last.
    auto last = compute_order.begin();
    for (ir::TaskId id : writers) {
      last = std::max(last, std::find(compute_order.begin(), compute_order.end(), id));
    }
    const ir::Task source = graph.task(*last);
    std::vector<ir::TensorId> pairs;
    std::vector<ir::OpId> accumulates;
    for (const Scattered& gradient : gradients) {
      pairs.push_back(gradient.partial);
      pairs.push_back(gradient.partial_shard);
      if (gradient.accumulate >= 0) accumulates.push_back(gradient.accumulate);
    }
    // A scatter whose slices are accumulated after it holds back the next microbatch's backward
    // (the accumulation window): not background.
    const ir::TaskId scatter = add_comm(ir::TaskKind::kReduceScatter, pairs, source.pass,
                                        source.microbatch, spec.reduce_stream,
                                        /*background=*/accumulates.empty());
    connect(writers, scatter);
    const ir::TaskId accumulated =
        accumulates.empty() ? scatter : accumulate_after(scatter, accumulates, last, compute_order);
    for (const Scattered& gradient : gradients) {
      graph.add_edge(gradient.accumulate >= 0 ? accumulated : scatter,
                     update_task(gradient.parameter), ir::EdgeKind::kData);
    }
  }

  // Moves the Accumulate ops `accumulates` of the microbatch of task *last (its last writer of
  // them) out of the backward task (or out of its BW half, when an order split it) into a task
  // after `scatter`; returns that task.
  ir::TaskId accumulate_after(ir::TaskId scatter, const std::vector<ir::OpId>& accumulates,
                              std::vector<ir::TaskId>::const_iterator last,
                              const std::vector<ir::TaskId>& compute_order) {
    ir::Task add = graph.task(*last);
    for (ir::OpId accumulate : accumulates) {
      for (ir::TaskId holder : tasks_running(accumulate)) {
        if (graph.task(holder).microbatch != add.microbatch) continue;
        auto& task_ops = graph.task(holder).ops;
        task_ops.erase(std::remove(task_ops.begin(), task_ops.end(), accumulate), task_ops.end());
      }
    }
    add.ops = accumulates;
    selected.push_back(true);
    const ir::TaskId accumulate_task = graph.add_task(std::move(add));
    graph.add_edge(scatter, accumulate_task, ir::EdgeKind::kData);
    // Accumulate while the task after the next one has not begun: the scatter overlaps the
    // next task, and the whole per-microbatch gradients are freed before backward moves two
    // tasks further on.
    if (compute_order.end() - last > 2) {
      graph.add_edge(accumulate_task, *(last + 2), ir::EdgeKind::kWindow);
    }
    return accumulate_task;
  }

  // Selects the compute tasks to replicate; tasks already kept in sync by
  // collectives are refused, since a second replication would not see them.
  void select() {
    selected.assign(graph.num_tasks(), false);
    int count = 0;
    for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
      const ir::Task& task = graph.task(id);
      selected[id] = task.kind == ir::TaskKind::kCompute && selects(spec.filter, task);
      count += selected[id];
    }
    if (count == 0) throw Error(context.where("filter") + ": the filter selects no task");
    for (const ir::Edge& edge : graph.edges()) {
      const ir::TaskKind from = graph.task(edge.from).kind;
      const ir::TaskKind to = graph.task(edge.to).kind;
      const bool collective = [](ir::TaskKind kind) {
        return kind != ir::TaskKind::kCompute && kind != ir::TaskKind::kSend &&
               kind != ir::TaskKind::kRecv;
      }(selected[edge.from] ? to : from);
      if ((selected[edge.from] || selected[edge.to]) && collective) {
        throw Error(context.where("filter") + ": " +
                    graph.describe(selected[edge.from] ? edge.from : edge.to) +
                    " is replicated already; replicate each task once, after split and place");
      }
    }
    // Parameters split over the replicas (expert parallelism) are each replica's own: their
    // gradients already sum every replica's rows.
    for (size_t p = 0; p < ops().trained.size(); ++p) {
      const bool split = ops().tensor(ops().trained[p].parameter).placed_over_replicas;
      if (selected[update_task_any(p)] && !split) {
        parameters.push_back(p);
      }
    }
  }

  // The shard directive split experts over groups of replicas this directive must form.
  void check_expert_groups() {
    const int64_t group = ops().replica_group;
    if (group == 0 || static_cast<int64_t>(devices.size()) == group) return;
    throw Error(context.where("devices") + ": the shard directive splits parameters over the " +
                std::to_string(group) + " replicas of each group, but this replicate spans " +
                std::to_string(devices.size()) +
                " devices; replicate over the shard directive's axis (or its device groups)");
  }

  // The task updating parameter p, selected or not.
  ir::TaskId update_task_any(size_t p) {
    const ir::OpId update = update_op(p);
    for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
      const auto& task_ops = graph.task(id).ops;
      if (std::find(task_ops.begin(), task_ops.end(), update) != task_ops.end()) return id;
    }
    throw Error(context.where() + ": the update of '" +
                ops().tensor(ops().trained[p].parameter).name + "' is in no task");
  }

  void run() {
    check_expert_groups();
    select();
    for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
      if (selected[id]) graph.task(id).devices = devices;
    }
    if (devices.size() > 1) {
      average_loss();
      const std::vector<std::vector<size_t>> gradient_buckets = buckets();
      cut_backward_at_buckets(gradient_buckets);
      if (spec.shard_grads) {
        shard_updates(reduce_scatter_gradients(gradient_buckets));
        if (spec.shard_params) gather_parameters_before_use();
      } else {
        all_reduce_gradients(gradient_buckets);
        if (spec.shard_optimizer) shard_updates({});
      }
    }
    if (context.route_transfers) route_transfers(graph, context);
  }
};

}  // namespace

void apply_replicate(ir::TaskGraph& graph, const DirectiveContext& context) {
  const auto& spec = std::get<ReplicateDirective>(context.directive.spec);
  Replication replication{graph, spec, context, {spec.devices.begin(), spec.devices.end()}, {}, {}};
  replication.run();
}

}  // namespace piper::planner
