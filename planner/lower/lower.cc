#include "planner/lower/lower.h"

#include <google/protobuf/arena.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "formats/build_info.h"
#include "formats/lr_schedule.h"
#include "formats/plan_file.h"
#include "planner/ir/placement.h"
#include "planner/lower/dropout_key.h"
#include "planner/lower/memory_plan.h"

namespace piper::planner {

plan::Pass to_plan(ir::Pass pass) {
  switch (pass) {
    case ir::Pass::kForward:
      return plan::FORWARD;
    case ir::Pass::kBackward:
      return plan::BACKWARD;
    case ir::Pass::kBackwardInput:
      return plan::BACKWARD_INPUT;
    case ir::Pass::kBackwardWeight:
      return plan::BACKWARD_WEIGHT;
    case ir::Pass::kUpdate:
      return plan::UPDATE;
  }
  return plan::PASS_UNSPECIFIED;
}

namespace {

// The overloads below would otherwise hide to_plan(ir::Pass).
using planner::to_plan;

plan::DType to_plan(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kFloat32:
      return plan::FLOAT32;
    case ir::DType::kInt64:
      return plan::INT64;
    case ir::DType::kBool:
      return plan::BOOL;
    case ir::DType::kBFloat16:
      return plan::BFLOAT16;
  }
  return plan::DTYPE_UNSPECIFIED;
}

plan::Role to_plan(ir::Role role) {
  switch (role) {
    case ir::Role::kInput:
      return plan::INPUT;
    case ir::Role::kActivation:
      return plan::ACTIVATION;
    case ir::Role::kParameter:
      return plan::PARAMETER;
    case ir::Role::kGradient:
      return plan::GRADIENT;
    case ir::Role::kOptimizerState:
      return plan::OPTIMIZER_STATE;
    case ir::Role::kLoss:
      return plan::LOSS;
    case ir::Role::kConstant:
      return plan::CONSTANT;
  }
  return plan::ROLE_UNSPECIFIED;
}

void add_attribute(plan::Kernel& kernel, const std::string& name, const ir::AttributeValue& value) {
  plan::Attribute& attr = *kernel.add_attributes();
  attr.set_name(name);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          attr.set_i(v);
        } else if constexpr (std::is_same_v<T, double>) {
          attr.set_f(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          attr.set_s(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          attr.mutable_ints()->mutable_values()->Add(v.begin(), v.end());
        } else {
          attr.mutable_floats()->mutable_values()->Add(v.begin(), v.end());
        }
      },
      value);
}

// Where a rank runs: its device in the DAG (its tensor-parallel group's) and its place in that
// device's group.
struct RankPlace {
  int device = 0;
  int member = 0;
  int parts = 1;
};

RankPlace place_of_rank(const ir::TaskGraph& graph, int rank) {
  RankPlace place{.device = rank};
  for (size_t g = 0; g < graph.shard_groups.size(); ++g) {
    const auto& group = graph.shard_groups[g];
    const auto found = std::find(group.begin(), group.end(), rank);
    if (found == group.end()) continue;
    place = {.device = static_cast<int>(g),
             .member = static_cast<int>(found - group.begin()),
             .parts = static_cast<int>(group.size())};
  }
  return place;
}

// Thrown by Lowering::specialise where the two ranks' plans turn out not to correspond one to
// one while emitting (a tensor or event run() did not make): the rank is then lowered from
// scratch and its class no longer specialised.
struct NotSymmetric {};

class Lowering {
 public:
  Lowering(const DagIndex& index, int rank, const LowerContext& context, plan::Plan& into)
      : plan_(into),
        dag_(index),
        graph_(index.graph()),
        ops_(graph_.op_graph()),
        rank_(rank),
        context_(context) {
    locate_rank();
    group_ids_ = &index.group_ids(parts_);
    if (index.holds_different_parameters()) collect_group_ = group_ids_->at(index.everyone());
  }

  void run() {
    write_header();
    order_ = local_tasks();
    find_replicas();
    add_release_edges();
    for (ir::TaskId id : order_) emit_task(id);
    add_groups();
    plan_.set_collect_parameters(dag_.holds_different_parameters());
    if (dag_.holds_different_parameters()) plan_.set_collect_group(collect_group_);
    add_batch_inputs();
    add_loss();
    place_tensors();
  }

  // Rewrites the plan run() made into that of `rank`, a rank of the same symmetry class: its
  // tasks correspond one to one with this plan's (the same kinds, passes, microbatches and ops,
  // in the same order on corresponding streams), so that every tensor, buffer, event and memory
  // offset stays; what follows the rank (the instructions of its own tasks, as its transfers
  // and its share of the gradient norm, and of tasks whose kernels read its replica index,
  // the streams' names, the parameters it loads, its batch rows, its groups) is emitted again
  // by the code that emitted it. Returns false, changing nothing, where the tasks do not
  // correspond; throws NotSymmetric, leaving the plan unusable, where that shows only while
  // emitting.
  bool specialise(int rank) {
    const int was = rank_, member = member_, parts = parts_;
    rank_ = rank;
    locate_rank();
    if (member_ != member || parts_ != parts || !match_tasks()) {
      if (member_order_ != nullptr) {
        for (ir::TaskId id : *member_order_) member_position_[static_cast<size_t>(id)] = -1;
      }
      rank_ = was;
      locate_rank();
      return false;
    }
    for (size_t s = 0; s < stream_names_.size(); ++s) {
      plan_.mutable_streams(static_cast<int>(s))->set_name(*stream_names_[s]);
    }
    plan_.mutable_header()->set_rank(rank_);
    // The planned timeline is added to each rank's plan after lowering (sim/planned_timeline.h).
    plan_.clear_planned_tasks();
    plan_.clear_planned_step();
    if (plan_.has_gradient_norm()) plan_.mutable_gradient_norm()->clear_gradients();
    rewriting_ = true;
    for (size_t p = 0; p < order_.size(); ++p) {
      if ((*member_order_)[p] != order_[p] || task_slots_[p].depends_on_rank) rewrite_task(p);
    }
    for (const TensorOrigin& origin : tensor_origins_) {
      if (!origin.depends_on_rank) continue;
      using_task_ = &graph_.task((*member_order_)[origin.position]);
      plan::ParameterLoad& load = *plan_.mutable_parameters(origin.load);
      const int index = load.tensor();
      load.Clear();
      describe_load(load, origin.tensor, index);
    }
    for (int i = 0; i < plan_.inputs_size(); ++i) {
      plan::BatchInput& input = *plan_.mutable_inputs(i);
      input.set_sample_offset(sample_offset(batch_inputs_[i], input.samples()));
    }
    rewriting_ = false;
    plan_.clear_groups();
    add_groups();
    for (ir::TaskId id : *member_order_) member_position_[id] = -1;
    return true;
  }

 private:
  // A tensor's buffer on this rank. Per-microbatch tensors have one per microbatch and
  // replica: a device that runs replica 1 of one stage and replica 0 of the next (DualPipe's
  // mirrored stages) holds both replicas' activations of a tensor between them.
  struct Instance {
    ir::TensorId tensor = -1;
    int microbatch = -1;  // -1: shared by every microbatch
    int replica = 0;
    auto operator<=>(const Instance&) const = default;
  };

  // Where a local task's instructions are, and whether they depend on the rank beyond the task
  // itself (its replica index, its device): specialise() emits those again.
  struct TaskSlots {
    int stream = 0;
    int first = 0;
    int count = 0;
    bool depends_on_rank = false;
  };
  // Which task made a plan tensor, and its parameter load (-1: none), whose shard or block or
  // initializer may follow the replica index of that task.
  struct TensorOrigin {
    ir::TensorId tensor = -1;
    size_t position = 0;  // in order_
    int load = -1;
    bool depends_on_rank = false;
  };

  void write_header() {
    plan::Header& header = *plan_.mutable_header();
    header.set_format_version(formats::kPlanFormatVersion);
    header.set_rank(rank_);
    header.set_world_size(dag_.num_ranks());
    header.set_plan_id(context_.plan_id);
    header.set_model_path(context_.model_path);
    header.set_model_checksum(context_.model_checksum);
    for (const auto& file : context_.external_files) *header.add_external_files() = file;
    header.set_planner_version(formats::piper_build_id());
    plan_.set_global_batch(context_.global_batch);
    plan::Optimizer& optimizer = *plan_.mutable_optimizer();
    const strategy::Optimizer& from = context_.optimizer;
    optimizer.set_type(from.type);
    optimizer.set_lr(from.lr);
    optimizer.set_momentum(from.momentum);
    optimizer.set_dampening(from.dampening);
    optimizer.set_nesterov(from.nesterov);
    optimizer.set_beta1(from.beta1);
    optimizer.set_beta2(from.beta2);
    optimizer.set_eps(from.eps);
    optimizer.set_weight_decay(from.weight_decay);
    formats::set_lr_schedule(from.lr_schedule, optimizer);
    optimizer.set_clip_grad_norm(from.clip_grad_norm);
  }

  // This rank's device in the DAG and its place in that device's tensor-parallel group.
  void locate_rank() {
    const RankPlace place = place_of_rank(graph_, rank_);
    device_ = place.device;
    member_ = place.member;
    parts_ = place.parts;
  }

  std::vector<int> ranks_of(const std::vector<int>& devices, int member) const {
    return dag_.ranks_of(devices, member);
  }

  std::vector<ir::TaskId> local_tasks() const { return dag_.device_tasks(device_); }

  // A send's buffer may be reused once the send is done: the second compute
  // task after the one that wrote it on that task's stream waits for that, so the send overlaps
  // the next task and the buffers of sent activations do not pile up. A task on another compute
  // stream (the overlapped partner of an order group) does not wait: the memory plan keeps the
  // buffers of concurrent tasks apart already, and waiting would hold the partner until the
  // send's peer receives.
  void add_release_edges() {
    for (size_t i = 0; i < order_.size(); ++i) {
      if (graph_.task(order_[i]).kind != ir::TaskKind::kSend) continue;
      std::optional<std::string> writer;
      for (const ir::Edge& edge : dag_.edges_into(order_[i])) {
        if (graph_.task(edge.from).kind == ir::TaskKind::kCompute) {
          writer = graph_.task(edge.from).stream;
        }
      }
      int computes = 0;
      for (size_t j = i + 1; j < order_.size(); ++j) {
        const ir::Task& task = graph_.task(order_[j]);
        if (task.kind == ir::TaskKind::kCompute && (!writer || task.stream == *writer) &&
            ++computes == 2) {
          release_into_[order_[j]].push_back({order_[i], order_[j], ir::EdgeKind::kTemporal});
          release_out_of_[order_[i]].push_back({order_[i], order_[j], ir::EdgeKind::kTemporal});
          break;
        }
      }
    }
  }

  // The DAG's edges into (out of) a task, then this rank's release edges: the edges the plan
  // orders by.
  // (Release edges are made between the tasks run() lowered: specialise() visits them as
  // edges between the corresponding tasks of its rank.)
  template <typename Visit>
  void for_each_edge_into(ir::TaskId id, Visit visit) const {
    for (const ir::Edge& edge : dag_.edges_into(id)) visit(edge);
    const auto release = release_into_.find(template_task(id));
    if (release == release_into_.end()) return;
    for (const ir::Edge& edge : release->second) visit(here(edge));
  }
  template <typename Visit>
  void for_each_edge_out_of(ir::TaskId id, Visit visit) const {
    for (const ir::Edge& edge : dag_.edges_out_of(id)) visit(edge);
    const auto release = release_out_of_.find(template_task(id));
    if (release == release_out_of_.end()) return;
    for (const ir::Edge& edge : release->second) visit(here(edge));
  }

  // The task run() lowered that corresponds to local task `id` of the rank being specialised
  // (-1 for a task that is not local), and the edge between the specialised rank's tasks that
  // corresponds to one between run()'s.
  ir::TaskId template_task(ir::TaskId id) const {
    if (!rewriting_) return id;
    const int position = member_position_[static_cast<size_t>(id)];
    return position < 0 ? -1 : order_[static_cast<size_t>(position)];
  }
  ir::Edge here(const ir::Edge& edge) const {
    if (!rewriting_) return edge;
    return {(*member_order_)[local_index_.at(edge.from)],
            (*member_order_)[local_index_.at(edge.to)], edge.kind};
  }

  // The stream of `task`, made if new; it stays background while all its tasks are.
  int stream_index(const ir::Task& task) {
    for (int s = 0; s < plan_.streams_size(); ++s) {
      plan::Stream& stream = *plan_.mutable_streams(s);
      if (stream.name() != task.stream) continue;
      stream.set_background(stream.background() && task.background);
      return s;
    }
    plan::Stream& stream = *plan_.add_streams();
    stream.set_name(task.stream);
    stream.set_background(task.background);
    return plan_.streams_size() - 1;
  }

  // Waits for events of predecessors on other streams, then the task's kernels,
  // then records this task's event if a successor on another stream needs it.
  void emit_task(ir::TaskId id) {
    const ir::Task& task = graph_.task(id);
    TaskSlots slots;
    if (!rewriting_) {
      slots.stream = stream_index(task);
      slots.first = plan_.streams(slots.stream).instructions_size();
    }
    plan::Stream& out = rewriting_ ? *rewrite_stream_ : *plan_.mutable_streams(slots.stream);
    depends_on_rank_ = false;
    for_each_edge_into(id, [&](const ir::Edge& edge) {
      const auto event = events_.find(template_task(edge.from));
      if (event != events_.end() && graph_.task(edge.from).stream != task.stream) {
        instruction(out, task, id, "wait")->mutable_wait()->set_event(event->second);
      }
    });
    if (!rewriting_) first_position_[id] = position_;
    using_task_ = &task;
    using_id_ = id;
    if (task.kind == ir::TaskKind::kCompute) {
      for (ir::OpId op : task.ops) emit_op(out, task, id, ops_.op(op));
    } else if (task.kind == ir::TaskKind::kSend || task.kind == ir::TaskKind::kRecv) {
      emit_transfer(out, task, id);
    } else {
      emit_collective(out, task, id);
    }
    bool needed_elsewhere = false;
    for_each_edge_out_of(id, [&](const ir::Edge& edge) {
      needed_elsewhere |= graph_.task(edge.to).stream != task.stream;
    });
    if (needed_elsewhere) {
      int event = plan_.num_events();
      if (rewriting_) {
        const auto found = events_.find(template_task(id));
        if (found == events_.end()) throw NotSymmetric{};
        event = found->second;
      } else {
        plan_.set_num_events(event + 1);
        events_[id] = event;
      }
      instruction(out, task, id, "record")->mutable_record()->set_event(event);
    }
    if (rewriting_) return;
    last_position_[id] = position_ - 1;
    slots.count = out.instructions_size() - slots.first;
    slots.depends_on_rank = depends_on_rank_;
    task_slots_.push_back(slots);
  }

  // The next instruction of `out`; when specialising, the next of the task's own, cleared.
  plan::Instruction* instruction(plan::Stream& out, const ir::Task& task, ir::TaskId id,
                                 const std::string& label) {
    plan::Instruction* inst = nullptr;
    if (rewriting_) {
      if (rewrite_next_ == rewrite_end_) throw NotSymmetric{};
      inst = out.mutable_instructions(rewrite_next_++);
      inst->Clear();
    } else {
      inst = out.add_instructions();
      ++position_;
    }
    inst->set_pass(to_plan(task.pass));
    inst->set_microbatch(task.microbatch);
    inst->set_task(id);
    inst->set_label(label);
    return inst;
  }

  int replica_index(const ir::Task& task) const {
    depends_on_rank_ = true;
    const auto found = std::find(task.devices.begin(), task.devices.end(), device_);
    return static_cast<int>(found - task.devices.begin());
  }

  // Which replica's values a task reads and writes: a transfer's is the replica pair it
  // connects, any other task's its own place among its devices.
  int replica_of(const ir::Task& task) const {
    const bool transfer = task.kind == ir::TaskKind::kSend || task.kind == ir::TaskKind::kRecv;
    return transfer ? task.replica : replica_index(task);
  }

  // The replicas whose values of each per-microbatch tensor reach this rank: those of the
  // compute tasks and recvs that write it, and for a batch input those of its readers.
  // Only where there are several (DualPipe's mirrored stages) do they get buffers of their
  // own; the gradient norm, read by tasks over other device sets, stays one.
  void find_replicas() {
    for (size_t p = 0; p < order_.size(); ++p) {
      const ir::Task& task = graph_.task(order_[p]);
      if (task.kind == ir::TaskKind::kRecv) {
        replicas_[{task.tensors.at(0), task.microbatch}].insert(task.replica);
        if (ops_.tensor(task.tensors.at(0)).role == ir::Role::kInput) {
          input_tasks_[{task.tensors.at(0), task.microbatch}].push_back(p);
        }
      }
      if (task.kind != ir::TaskKind::kCompute) continue;
      for (ir::OpId op : task.ops) {
        for (ir::TensorId in : ops_.op(op).inputs) {
          if (in >= 0 && ops_.tensor(in).role == ir::Role::kInput) {
            replicas_[{in, task.microbatch}].insert(replica_index(task));
            input_tasks_[{in, task.microbatch}].push_back(p);
          }
        }
        for (ir::TensorId out : ops_.op(op).outputs) {
          if (out >= 0) replicas_[{out, task.microbatch}].insert(replica_index(task));
        }
      }
    }
  }

  // The replica whose buffer of `tensor` the task being emitted uses.
  int replica_of_use(ir::TensorId tensor, int microbatch) const {
    const auto found = replicas_.find({tensor, microbatch});
    if (found == replicas_.end() || found->second.size() < 2) return 0;
    return replica_of(*using_task_);
  }

  void emit_op(plan::Stream& out, const ir::Task& task, ir::TaskId id, const ir::Op& op) {
    if (is_tensor_parallel_collective(op.type)) {
      emit_tensor_parallel_collective(out, task, id, op);
      return;
    }
    if (op.type == "piper.AllToAllV" || op.type == "piper.AllToAllVReturn") {
      emit_row_exchange(out, task, id, op);
      return;
    }
    plan::Kernel& kernel = *instruction(out, task, id, op.name)->mutable_kernel();
    kernel.set_op_type(op.type);
    for (const auto& [name, value] : op.attributes) add_attribute(kernel, name, value);
    if (op.type == "piper.Shard") {
      // Which slice is this rank's: its place in its tensor-parallel group for a block, else its
      // place among the task's replicas.
      const bool block = ir::attr_string(op.attributes, "group", "") == "tensor" &&
                         !ir::reshards_over_replicas(op);
      add_attribute(kernel, "shard_index",
                    static_cast<int64_t>(block ? member_ : replica_index(task)));
    }
    for (ir::TensorId in : op.inputs) kernel.add_inputs(use(in, task.microbatch));
    for (ir::TensorId out_id : op.outputs) kernel.add_outputs(use(out_id, task.microbatch));
    if (op.type == "Dropout") describe_dropout(kernel, task, op);
    if (op.type == "piper.SumSquares") {
      describe_norm_share(op, kernel);
      count_whole_gradients_once(kernel, op);
    }
    if (!op.outputs.empty() && op.outputs[0] == ops_.grad_norm) {
      plan_.mutable_gradient_norm()->set_norm(kernel.outputs(0));
    }
  }

  // Where this instance of a Dropout lies in its whole tensor: a member of its tensor-parallel
  // group, and replica-major among the step's microbatches of every replica.
  void describe_dropout(plan::Kernel& kernel, const ir::Task& task, const ir::Op& op) {
    if (!replica_rows_) replica_rows_ = ir::replica_placements(ops_);
    InstancePlace place;
    place.member = member_;
    place.parts = parts_;
    place.instance = replica_index(task) * dag_.microbatches() + std::max(task.microbatch, 0);
    place.instances = static_cast<int>(task.devices.size()) * dag_.microbatches();
    *kernel.mutable_dropout() = dropout_key(ops_, op, *replica_rows_, place);
  }

  // The gradients of this rank's share of the norm, named by their parameters.
  void describe_norm_share(const ir::Op& op, const plan::Kernel& kernel) {
    depends_on_rank_ = true;  // specialise() lists the norm's gradients anew
    std::map<ir::TensorId, std::string> parameters;
    for (const ir::TrainedParameter& trained : ops_.trained) {
      const ir::Tensor& parameter = ops_.tensor(trained.parameter);
      parameters[trained.gradient] =
          parameter.initializer.empty() ? parameter.name : initializer_here(parameter);
    }
    plan::GradientNorm& norm = *plan_.mutable_gradient_norm();
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      plan::NormedGradient& gradient = *norm.add_gradients();
      gradient.set_tensor(kernel.inputs(static_cast<int>(i)));
      gradient.set_parameter(parameters.at(op.inputs[i]));
    }
  }

  static bool is_tensor_parallel_collective(const std::string& type) {
    return type == "piper.AllReduce" || type == "piper.AllGather" ||
           type == "piper.ReduceScatter" || type == "piper.AllToAll";
  }

  // The group a placed tensor's reshards and blocks are over: this rank's tensor-parallel
  // group, or the replicas of the task (expert parallelism, averages of batch means).
  int placement_group(const ir::Task& task, bool over_replicas) const {
    if (!over_replicas) depends_on_rank_ = true;  // the group of this rank's device
    if (over_replicas) return group_ids_->at(ranks_of(task.devices, member_));
    return group_ids_->at(graph_.shard_groups.at(device_));
  }

  // A reshard between placements (directives/shard.cc): a collective over this rank's
  // tensor-parallel group, on the stream of the task that needs it.
  void emit_tensor_parallel_collective(plan::Stream& out, const ir::Task& task, ir::TaskId id,
                                       const ir::Op& op) {
    plan::Collective& collective = *instruction(out, task, id, op.name)->mutable_collective();
    collective.set_kind(op.type == "piper.AllReduce"   ? plan::Collective::ALL_REDUCE
                        : op.type == "piper.AllGather" ? plan::Collective::ALL_GATHER
                        : op.type == "piper.AllToAll"  ? plan::Collective::ALL_TO_ALL
                                                       : plan::Collective::REDUCE_SCATTER);
    collective.set_group(placement_group(task, ir::runs_over_replicas(op)));
    collective.set_average(ir::attr_int(op.attributes, "average", 0) != 0);
    collective.add_inputs(use(op.inputs.at(0), task.microbatch));
    collective.add_outputs(use(op.outputs.at(0), task.microbatch));
  }

  // Expert parallelism's all-to-all-v (directives/expert_modules.h): over the task's replicas,
  // every input and output as the op lists them.
  void emit_row_exchange(plan::Stream& out, const ir::Task& task, ir::TaskId id, const ir::Op& op) {
    plan::Collective& collective = *instruction(out, task, id, op.name)->mutable_collective();
    collective.set_kind(op.type == "piper.AllToAllV" ? plan::Collective::ALL_TO_ALL_V
                                                     : plan::Collective::ALL_TO_ALL_V_RETURN);
    collective.set_group(placement_group(task, true));
    for (ir::TensorId in : op.inputs) collective.add_inputs(use(in, task.microbatch));
    for (ir::TensorId out_id : op.outputs) collective.add_outputs(use(out_id, task.microbatch));
  }

  // A gradient whole on every member of a tensor-parallel group is the same on each: only the
  // first adds it to the norm. Blocks are each member's own (an expert block is whole over the
  // tensor-parallel group).
  void count_whole_gradients_once(plan::Kernel& kernel, const ir::Op& op) const {
    if (member_ == 0) return;
    for (plan::Attribute& attribute : *kernel.mutable_attributes()) {
      if (attribute.name() != "counts") continue;
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const ir::Tensor& held = ops_.tensor(op.inputs[i]);
        const ir::Tensor& whole = held.shard_of >= 0 ? ops_.tensor(held.shard_of) : held;
        if (!whole.placement.is_sharded() || whole.placed_over_replicas) {
          attribute.mutable_ints()->set_values(static_cast<int>(i), 0);
        }
      }
    }
  }

  std::vector<int> collective_ranks(const ir::Task& task, int member) const {
    return dag_.collective_ranks(task, member, parts_);
  }

  void emit_collective(plan::Stream& out, const ir::Task& task, ir::TaskId id) {
    const std::string label = ir::to_string(task.kind) + " " + ops_.tensor(task.tensors[0]).name +
                              (task.tensors.size() > 2 ? " (+more)" : "");
    plan::Collective& collective = *instruction(out, task, id, label)->mutable_collective();
    collective.set_group(group_ids_->at(collective_ranks(task, member_)));
    collective.set_average(task.average);
    const auto add = [&](ir::TensorId tensor, bool input) {
      const int index = use(tensor, task.microbatch);
      (input ? collective.mutable_inputs() : collective.mutable_outputs())->Add(index);
      if (!rewriting_) (input ? comm_inputs_ : comm_outputs_)[id].push_back(index);
    };
    switch (task.kind) {
      case ir::TaskKind::kAllReduce:
        collective.set_kind(plan::Collective::ALL_REDUCE);
        for (ir::TensorId tensor : task.tensors) {
          add(tensor, true);
          add(tensor, false);
        }
        break;
      case ir::TaskKind::kReduceScatter:
      case ir::TaskKind::kAllGather:
        collective.set_kind(task.kind == ir::TaskKind::kReduceScatter
                                ? plan::Collective::REDUCE_SCATTER
                                : plan::Collective::ALL_GATHER);
        for (size_t i = 0; i + 1 < task.tensors.size(); i += 2) {
          add(task.tensors[i], true);
          add(task.tensors[i + 1], false);
        }
        break;
      default:
        throw std::logic_error("lowering " + graph_.describe(id) + " is not implemented yet");
    }
  }

  // A send and its recv share a tag: the send task's id in the global DAG.
  void emit_transfer(plan::Stream& out, const ir::Task& task, ir::TaskId id) {
    const ir::TensorId tensor = task.tensors.at(0);
    const std::string label = ir::to_string(task.kind) + " " + ops_.tensor(tensor).name;
    plan::Instruction& inst = *instruction(out, task, id, label);
    const int index = use(tensor, task.microbatch);
    if (!rewriting_) {
      // A transfer reads or writes; both lists exist, one of them empty.
      (task.kind == ir::TaskKind::kSend ? comm_inputs_ : comm_outputs_)[id].push_back(index);
      (task.kind == ir::TaskKind::kSend ? comm_outputs_ : comm_inputs_)[id];
    }
    if (task.kind == ir::TaskKind::kSend) {
      plan::Send& send = *inst.mutable_send();
      send.set_tensor(index);
      send.set_peer(ranks_of({task.peer}, member_).front());
      send.set_tag(id);
      return;
    }
    plan::Recv& recv = *inst.mutable_recv();
    recv.set_tensor(index);
    recv.set_peer(ranks_of({task.peer}, member_).front());
    recv.set_tag(dag_.sending_task(id));
  }

  void add_groups() {
    for (const auto& [devices, id] : *group_ids_) {
      if (std::find(devices.begin(), devices.end(), rank_) == devices.end()) continue;
      plan::CommGroup& group = *plan_.add_groups();
      group.set_id(id);
      group.mutable_ranks()->Add(devices.begin(), devices.end());
    }
  }

  // The plan index of a tensor instance, extending its lifetime to now.
  int use(ir::TensorId tensor, int microbatch) {
    if (tensor < 0) return -1;
    if (rewriting_) return reuse(tensor, microbatch);
    const Instance key = instance(tensor, microbatch);
    auto found = index_.find(key);
    const bool added = found == index_.end();
    if (added) {
      found = index_.emplace(key, add_tensor(key)).first;
      lifetimes_.push_back({0, position_, position_, false});
    }
    lifetimes_[found->second].last = position_;
    const int index = found->second;
    task_buffers_[using_id_].push_back(index);
    // A run-time extent lives as long as every tensor it sizes.
    for (const ir::DynamicDim& dim : ops_.tensor(tensor).dynamic) {
      const int extent = use(dim.extent, microbatch);
      if (added) add_dynamic_dim(index, dim, extent);
    }
    return index;
  }

  Instance instance(ir::TensorId tensor, int microbatch) const {
    const bool per_microbatch = ir::is_per_microbatch(ops_, tensor);
    return {.tensor = tensor,
            .microbatch = per_microbatch ? microbatch : -1,
            .replica = per_microbatch ? replica_of_use(tensor, microbatch) : 0};
  }

  void add_dynamic_dim(int index, const ir::DynamicDim& dim, int extent) {
    plan::DynamicDim& out = *plan_.mutable_tensors(index)->add_dynamic_dims();
    out.set_dim(dim.dim);
    out.set_extent(extent);
    out.set_scale(dim.scale);
  }

  // use() when specialising: the plan index of the tensor that corresponds to `tensor` in the
  // plan run() made, whose description is rewritten where it is another IR tensor (one of a
  // task of the rank's own, as its share of the gradient norm).
  int reuse(ir::TensorId tensor, int microbatch) {
    const auto translated = tensor_to_template_.find(tensor);
    const ir::TensorId was = translated == tensor_to_template_.end() ? tensor : translated->second;
    const auto found = index_.find(instance(was, microbatch));
    if (found == index_.end()) throw NotSymmetric{};
    const int index = found->second;
    const bool renamed = was != tensor;
    if (renamed) {
      const ir::Tensor& now = ops_.tensor(tensor);
      if (!now.initializer.empty() || !now.data.empty()) throw NotSymmetric{};
      plan::Tensor& out = *plan_.mutable_tensors(index);
      const int64_t offset = out.offset();
      out.Clear();
      describe_tensor(out, {.tensor = tensor,
                            .microbatch = found->first.microbatch,
                            .replica = found->first.replica});
      out.set_offset(offset);
    }
    for (const ir::DynamicDim& dim : ops_.tensor(tensor).dynamic) {
      const int extent = reuse(dim.extent, microbatch);
      if (renamed) add_dynamic_dim(index, dim, extent);
    }
    return index;
  }

  // "h@mb3", and "h@mb3@r1" where this rank holds several replicas' values of it.
  std::string instance_name(const ir::Tensor& tensor, const Instance& key) const {
    std::string name = tensor.name;
    if (key.microbatch > 0) name += "@mb" + std::to_string(key.microbatch);
    if (key.replica > 0) name += "@r" + std::to_string(key.replica);
    return name;
  }

  int add_tensor(const Instance& key) {
    const ir::Tensor& tensor = ops_.tensor(key.tensor);
    describe_tensor(*plan_.add_tensors(), key);
    const int index = plan_.tensors_size() - 1;
    TensorOrigin origin{.tensor = key.tensor, .position = task_slots_.size()};
    if (!tensor.initializer.empty()) {
      // What the load reads of the rank is the tensor's, not the task's.
      const bool task_depends_on_rank = depends_on_rank_;
      depends_on_rank_ = false;
      origin.load = plan_.parameters_size();
      describe_load(*plan_.add_parameters(), key.tensor, index);
      origin.depends_on_rank = depends_on_rank_;
      depends_on_rank_ = task_depends_on_rank;
    } else if (!tensor.data.empty()) {
      plan::ConstantValue& constant = *plan_.add_constants();
      constant.set_tensor(index);
      constant.set_data(tensor.data.data(), tensor.data.size());
    }
    tensor_origins_.push_back(origin);
    return index;
  }

  void describe_tensor(plan::Tensor& out, const Instance& key) const {
    const ir::Tensor& tensor = ops_.tensor(key.tensor);
    out.set_name(instance_name(tensor, key));
    out.set_dtype(to_plan(tensor.dtype));
    out.mutable_shape()->Add(tensor.shape.begin(), tensor.shape.end());
    out.set_role(to_plan(tensor.role));
    out.set_microbatch(key.microbatch);
    out.set_bytes(ir::num_elements(tensor.shape) * ir::dtype_size(tensor.dtype));
    out.set_zero_at_step_start(tensor.accumulated);
  }

  // What this rank loads into plan tensor `index` for parameter `id`, as the task being emitted
  // uses it.
  void describe_load(plan::ParameterLoad& load, ir::TensorId id, int index) const {
    const ir::Tensor& tensor = ops_.tensor(id);
    load.set_initializer(initializer_here(tensor));
    load.set_tensor(index);
    if (tensor.shard_of >= 0) describe_shard(*load.mutable_shard(), tensor);
    const ir::TensorId whole = tensor.shard_of >= 0 ? tensor.shard_of : id;
    if (ops_.tensor(whole).placement.is_sharded()) {
      describe_block(*load.mutable_block(), ops_.tensor(whole));
    }
  }

  // The initializer this rank loads for `tensor`: its own, or where each replica binds one of
  // its own (an expert slot), the one of this rank's replica of the task being emitted.
  const std::string& initializer_here(const ir::Tensor& tensor) const {
    if (tensor.replica_initializers.empty()) return tensor.initializer;
    return tensor.replica_initializers.at(static_cast<size_t>(replica_index(*using_task_)));
  }

  // This rank's slice of a sharded parameter: the one at its place among the
  // replicas of the task that uses it. With fewer elements than replicas
  // times the slice size, the last slices are padding only: they load
  // nothing, from the end of the parameter.
  void describe_shard(plan::ParameterShard& shard, const ir::Tensor& tensor) const {
    const int64_t size = ir::num_elements(tensor.shape);
    const int64_t elements = ir::num_elements(ops_.tensor(tensor.shard_of).shape);
    const int64_t offset = std::min(replica_index(*using_task_) * size, elements);
    shard.set_element_offset(offset);
    shard.set_element_count(std::min(elements - offset, size));
    shard.set_elements(elements);
    shard.set_group(group_ids_->at(ranks_of(using_task_->devices, member_)));
  }

  // This rank's block of a parameter split over its tensor-parallel group, or over the
  // replicas of the task that uses it (expert parallelism).
  void describe_block(plan::ParameterBlock& block, const ir::Tensor& tensor) const {
    const int dim = tensor.placement.dim;
    const bool over_replicas = tensor.placed_over_replicas;
    block.set_dim(dim);
    block.set_size(tensor.shape.at(dim));
    block.set_start((over_replicas ? replica_index(*using_task_) : member_) * tensor.shape.at(dim));
    block.set_group(placement_group(*using_task_, over_replicas));
  }

  void add_batch_inputs() {
    for (const auto& [key, index] : index_) {
      const ir::Tensor& tensor = ops_.tensor(key.tensor);
      if (tensor.role != ir::Role::kInput) continue;
      if (tensor.label_count.labels >= 0) {
        add_label_count(tensor.label_count, index);
        continue;
      }
      plan::BatchInput& input = *plan_.add_inputs();
      input.set_input(tensor.name);
      input.set_tensor(index);
      const int64_t samples = tensor.shape.empty() ? 1 : tensor.shape[0];
      input.set_samples(samples);
      input.set_sample_offset(sample_offset(key, samples));
      input.set_int_high(tensor.int_high);
      batch_inputs_.push_back(key);
    }
  }

  // Replica-major: replica k takes rows [k*M*b, (k+1)*M*b), microbatch m of them [m*b, ...).
  // A batch input read by one replica here is that replica's rows: the lowest replica of the
  // local tasks that read or receive it.
  int64_t sample_offset(const Instance& key, int64_t samples) const {
    int replica = key.replica;
    if (replica == 0) {
      const std::vector<ir::TaskId>& tasks = rewriting_ ? *member_order_ : order_;
      replica = std::numeric_limits<int>::max();
      for (size_t p : input_tasks_.at({key.tensor, key.microbatch})) {
        replica = std::min(replica, replica_of(graph_.task(tasks[p])));
      }
    }
    return (replica * dag_.microbatches() + std::max(key.microbatch, 0)) * samples;
  }

  // Pairs the local tasks of the rank being specialised with run()'s by position, names the
  // streams and maps the IR tensors of tasks of the rank's own to run()'s; false where they do
  // not correspond.
  bool match_tasks() {
    const std::vector<ir::TaskId>& theirs = dag_.device_tasks(device_);
    member_order_ = nullptr;
    if (theirs.size() != order_.size()) return false;
    member_order_ = &theirs;
    member_position_.resize(static_cast<size_t>(graph_.num_tasks()), -1);
    tensor_to_template_.clear();
    std::vector<const std::string*>& names = stream_names_;
    names.assign(static_cast<size_t>(plan_.streams_size()), nullptr);
    for (size_t p = 0; p < order_.size(); ++p) {
      const ir::Task& was = graph_.task(order_[p]);
      const ir::Task& now = graph_.task(theirs[p]);
      if (was.kind != now.kind || was.pass != now.pass || was.microbatch != now.microbatch ||
          was.ops.size() != now.ops.size() || was.tensors.size() != now.tensors.size()) {
        return false;
      }
      const std::string*& name = names[static_cast<size_t>(task_slots_[p].stream)];
      if (name == nullptr) {
        name = &now.stream;
      } else if (*name != now.stream) {
        return false;
      }
      member_position_[static_cast<size_t>(theirs[p])] = static_cast<int>(p);
      if (theirs[p] == order_[p]) continue;
      for (size_t k = 0; k < was.ops.size(); ++k) {
        const ir::Op& a = ops_.op(was.ops[k]);
        const ir::Op& b = ops_.op(now.ops[k]);
        if (a.type != b.type || a.inputs.size() != b.inputs.size() ||
            a.outputs.size() != b.outputs.size()) {
          return false;
        }
        for (size_t i = 0; i < a.inputs.size(); ++i) {
          if (!match_tensor(a.inputs[i], b.inputs[i])) return false;
        }
        for (size_t i = 0; i < a.outputs.size(); ++i) {
          if (!match_tensor(a.outputs[i], b.outputs[i])) return false;
        }
      }
      for (size_t i = 0; i < was.tensors.size(); ++i) {
        if (!match_tensor(was.tensors[i], now.tensors[i])) return false;
      }
    }
    // Two of run()'s streams that are one stream here (a transfer to a device that is also a
    // pipeline neighbour here) do not correspond.
    for (size_t s = 0; s < names.size(); ++s) {
      for (size_t t = 0; t < s; ++t) {
        if (*names[t] == *names[s]) return false;
      }
    }
    return true;
  }

  bool match_tensor(ir::TensorId was, ir::TensorId now) {
    if (was == now) return true;
    if (was < 0 || now < 0) return false;
    const auto [found, added] = tensor_to_template_.emplace(now, was);
    return added || found->second == was;
  }

  // Emits local task `position` of the rank being specialised into its instructions.
  void rewrite_task(size_t position) {
    const TaskSlots& slots = task_slots_[position];
    rewrite_stream_ = plan_.mutable_streams(slots.stream);
    rewrite_next_ = slots.first;
    rewrite_end_ = slots.first + slots.count;
    emit_task((*member_order_)[position]);
    if (rewrite_next_ != rewrite_end_) throw NotSymmetric{};
  }

  void add_label_count(const ir::LabelCount& count, int index) {
    const ir::Tensor& labels = ops_.tensor(count.labels);
    plan::LabelCount& out = *plan_.add_label_counts();
    out.set_tensor(index);
    out.set_input(labels.name);
    out.mutable_sample_shape()->Add(labels.shape.begin() + 1, labels.shape.end());
    out.set_int_high(labels.int_high);
    out.set_ignore_index(count.ignore_index);
    for (const ir::CountWindow& window : count.window) {
      plan::CountWindow& to = *out.add_window();
      to.set_start(window.start);
      to.set_step(window.step);
      to.set_count(window.count);
    }
  }

  void add_loss() {
    std::vector<int> terms;
    for (const auto& [key, index] : index_) {
      if (key.tensor == ops_.loss) terms.push_back(index);
    }
    for (int index : terms) {
      plan::LossTerm& term = *plan_.add_loss();
      term.set_tensor(index);
      term.set_weight(1.0 / static_cast<double>(terms.size()));
    }
  }

  // Inputs are fed before the step and the loss is read after it; state,
  // parameters, their gradients and constants persist.
  void place_tensors() {
    plan::MemorySummary& memory = *plan_.mutable_memory();
    for (int i = 0; i < plan_.tensors_size(); ++i) {
      const plan::Tensor& tensor = plan_.tensors(i);
      BufferRequest& request = lifetimes_[i];
      request.bytes = tensor.bytes();
      switch (tensor.role()) {
        case plan::INPUT:
          request.first = 0;
          memory.set_input_bytes(memory.input_bytes() + tensor.bytes());
          break;
        case plan::LOSS:
          request.last = position_;
          break;
        case plan::PARAMETER:
          memory.set_parameter_bytes(memory.parameter_bytes() + tensor.bytes());
          request.persistent = true;
          break;
        case plan::GRADIENT:
          memory.set_gradient_bytes(memory.gradient_bytes() + tensor.bytes());
          request.persistent = true;
          break;
        case plan::OPTIMIZER_STATE:
          memory.set_optimizer_bytes(memory.optimizer_bytes() + tensor.bytes());
          request.persistent = true;
          break;
        default:
          request.persistent = tensor.role() == plan::CONSTANT;
          break;
      }
    }
    // The engine reads the norm after the step, as it reads the loss.
    if (plan_.has_gradient_norm()) lifetimes_[plan_.gradient_norm().norm()].last = position_;
    const std::vector<std::vector<bool>> ancestors = local_ancestors();
    keep_comm_buffers_alive(ancestors);
    keep_concurrent_buffers_apart(ancestors);
    const std::vector<int> buffer = share_reshaped_buffers();
    const MemoryPlan placed =
        context_.memory_plans ? context_.memory_plans->plan(lifetimes_) : plan_memory(lifetimes_);
    for (int i = 0; i < plan_.tensors_size(); ++i) {
      plan_.mutable_tensors(i)->set_offset(placed.offsets[buffer[i]]);
    }
    memory.set_arena_bytes(placed.arena_bytes);
    memory.set_activation_bytes(placed.peak_transient_bytes);
  }

  // A reshape (Reshape, Flatten, Squeeze, Unsqueeze, Identity) of an activation moves no data
  // when its output takes its input's bytes: the kernel then finds its input in place. Chains
  // share one buffer, which lives from the first member's first use to the last one's last.
  // Only activations written once, by one kernel, and touched by no transfer share: their bytes
  // never change while any member is live. Returns, per tensor, the tensor whose buffer it
  // uses; the other members' requests take no bytes.
  std::vector<int> share_reshaped_buffers() {
    const int count = plan_.tensors_size();
    std::vector<int> buffer(count);
    for (int i = 0; i < count; ++i) buffer[i] = i;
    std::vector<int> writes(count, 0);
    std::vector<bool> transferred(count, false);
    for (const auto* transfers : {&comm_inputs_, &comm_outputs_}) {
      for (const auto& [id, indices] : *transfers) {
        for (int index : indices) transferred[index] = true;
      }
    }
    for (const plan::Stream& stream : plan_.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        for (int output : instruction.kernel().outputs()) {
          if (output >= 0) ++writes[output];
        }
      }
    }
    const auto shareable = [&](int index) {
      const plan::Tensor& tensor = plan_.tensors(index);
      return tensor.role() == plan::ACTIVATION && !tensor.zero_at_step_start() &&
             writes[index] == 1 && !transferred[index];
    };
    const auto root = [&](int index) {
      while (buffer[index] != index) index = buffer[index];
      return index;
    };
    static const std::set<std::string> kReshapes = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                                    "Identity"};
    for (const plan::Stream& stream : plan_.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        const plan::Kernel& kernel = instruction.kernel();
        if (!kReshapes.count(kernel.op_type()) || kernel.inputs_size() < 1 ||
            kernel.outputs_size() != 1) {
          continue;
        }
        const int x = kernel.inputs(0), y = kernel.outputs(0);
        if (x >= 0 && y >= 0 && shareable(x) && shareable(y)) buffer[y] = root(x);
      }
    }
    for (int i = 0; i < count; ++i) {
      buffer[i] = root(i);
      if (buffer[i] == i) continue;
      BufferRequest& shared = lifetimes_[buffer[i]];
      shared.first = std::min(shared.first, lifetimes_[i].first);
      shared.last = std::max(shared.last, lifetimes_[i].last);
      lifetimes_[i].bytes = 0;
    }
    return buffer;
  }

  // A transfer runs on its own stream, concurrently with compute. What it
  // reads stays allocated until a task that waits for it begins. What it
  // writes may take the bytes of a buffer only if every use of that buffer
  // happened before the transfer began: its lifetime starts at the first
  // compute task that is not among the transfer's ancestors.
  void keep_comm_buffers_alive(const std::vector<std::vector<bool>>& ancestors) {
    for (const auto& [id, inputs] : comm_inputs_) {
      int waiter = position_;
      for_each_edge_out_of(id, [&](const ir::Edge& edge) {
        const auto found = first_position_.find(edge.to);
        if (found != first_position_.end()) waiter = std::min(waiter, found->second);
      });
      for (int index : inputs) lifetimes_[index].last = std::max(lifetimes_[index].last, waiter);
      const auto& before = ancestors[local_index_.at(id)];
      int start = position_;
      for (size_t i = 0; i < order_.size(); ++i) {
        if (graph_.task(order_[i]).kind == ir::TaskKind::kCompute && !before[i]) {
          start = first_position_.at(order_[i]);
          break;
        }
      }
      for (int index : comm_outputs_.at(id)) {
        lifetimes_[index].first = std::min(lifetimes_[index].first, start);
      }
    }
  }

  // Compute tasks on two streams that no chain of edges orders (an order group's overlapped
  // forward and backward) run at once: every buffer either touches lives from the first one's
  // start to the second one's end, so that neither takes the other's bytes.
  void keep_concurrent_buffers_apart(const std::vector<std::vector<bool>>& ancestors) {
    for (size_t i = 0; i < order_.size(); ++i) {
      const ir::Task& first = graph_.task(order_[i]);
      if (first.kind != ir::TaskKind::kCompute) continue;
      for (size_t j = i + 1; j < order_.size(); ++j) {
        const ir::Task& second = graph_.task(order_[j]);
        if (second.kind != ir::TaskKind::kCompute || second.stream == first.stream ||
            ancestors[j][i]) {
          continue;
        }
        const int begin = first_position_.at(order_[i]);
        const int end = last_position_.at(order_[j]);
        for (ir::TaskId id : {order_[i], order_[j]}) {
          for (int index : task_buffers_[id]) {
            lifetimes_[index].first = std::min(lifetimes_[index].first, begin);
            lifetimes_[index].last = std::max(lifetimes_[index].last, end);
          }
        }
      }
    }
  }

  // ancestors[i][j]: local task j (in emission order) finishes before local
  // task i starts, by a chain of edges and of instructions on one stream.
  std::vector<std::vector<bool>> local_ancestors() {
    for (size_t i = 0; i < order_.size(); ++i) local_index_[order_[i]] = i;
    std::vector<std::vector<size_t>> predecessors(order_.size());
    std::map<std::string, size_t> last_on_stream;
    for (size_t i = 0; i < order_.size(); ++i) {
      const auto previous = last_on_stream.find(graph_.task(order_[i]).stream);
      if (previous != last_on_stream.end()) predecessors[i].push_back(previous->second);
      last_on_stream[graph_.task(order_[i]).stream] = i;
    }
    for (size_t i = 0; i < order_.size(); ++i) {
      for_each_edge_into(order_[i], [&](const ir::Edge& edge) {
        const auto from = local_index_.find(edge.from);
        if (from != local_index_.end()) predecessors[i].push_back(from->second);
      });
    }
    std::vector<std::vector<bool>> ancestors(order_.size(), std::vector<bool>(order_.size()));
    for (size_t i = 0; i < order_.size(); ++i) {
      for (size_t p : predecessors[i]) {
        ancestors[i][p] = true;
        for (size_t j = 0; j < p; ++j) {
          if (ancestors[p][j]) ancestors[i][j] = true;
        }
      }
    }
    return ancestors;
  }

  plan::Plan& plan_;
  const DagIndex& dag_;
  const ir::TaskGraph& graph_;
  const ir::OpGraph& ops_;
  int rank_;
  const LowerContext& context_;
  std::map<Instance, int> index_;
  std::vector<BufferRequest> lifetimes_;
  std::map<ir::TaskId, int> events_;
  int position_ = 0;
  // (tensor, microbatch) -> the replicas whose values reach this rank (find_replicas).
  std::map<std::pair<ir::TensorId, int>, std::set<int>> replicas_;
  const std::map<std::vector<int>, int>* group_ids_ = nullptr;  // ranks, in group order -> id
  int device_ = 0;          // this rank's device in the DAG: its tensor-parallel group's
  int member_ = 0;          // its place in that group
  int parts_ = 1;           // the group's size
  int collect_group_ = -1;  // pipelines: the group --save-onnx collects parameters over
  std::optional<ir::ReplicaRows> replica_rows_;  // computed for the first Dropout
  std::vector<ir::TaskId> order_;                // this rank's tasks in emission order
  // This rank's release edges (add_release_edges), by the task they enter and leave.
  std::map<ir::TaskId, std::vector<ir::Edge>> release_into_;
  std::map<ir::TaskId, std::vector<ir::Edge>> release_out_of_;
  std::map<ir::TaskId, size_t> local_index_;
  const ir::Task* using_task_ = nullptr;  // the task being emitted
  std::map<ir::TaskId, int> first_position_;
  std::map<ir::TaskId, int> last_position_;
  ir::TaskId using_id_ = -1;                             // the task being emitted
  std::map<ir::TaskId, std::vector<int>> task_buffers_;  // the plan tensors each task uses
  std::map<ir::TaskId, std::vector<int>> comm_inputs_;
  std::map<ir::TaskId, std::vector<int>> comm_outputs_;
  // (tensor, microbatch) of a batch input -> the positions in order_ of the tasks that read or
  // receive it.
  std::map<std::pair<ir::TensorId, int>, std::vector<size_t>> input_tasks_;

  // What specialise() reads of run()'s plan.
  std::vector<TaskSlots> task_slots_;         // by position in order_
  std::vector<TensorOrigin> tensor_origins_;  // by plan tensor
  std::vector<Instance> batch_inputs_;        // by plan batch input
  mutable bool depends_on_rank_ = false;      // the task being emitted read the rank's place
  // While specialising: the rank's local tasks, their positions by task id (-1: not local),
  // its IR tensors that are others in run()'s plan, and the instructions of the task being
  // emitted again.
  bool rewriting_ = false;
  const std::vector<ir::TaskId>* member_order_ = nullptr;
  std::vector<int> member_position_;
  std::unordered_map<ir::TensorId, ir::TensorId> tensor_to_template_;
  std::vector<const std::string*> stream_names_;  // the rank's name of each plan stream
  plan::Stream* rewrite_stream_ = nullptr;
  int rewrite_next_ = 0;
  int rewrite_end_ = 0;
};

}  // namespace

plan::Plan lower(const DagIndex& index, int rank, const LowerContext& context) {
  plan::Plan plan;
  lower(index, rank, context, plan);
  return plan;
}

void lower(const DagIndex& index, int rank, const LowerContext& context, plan::Plan& into) {
  Lowering(index, rank, context, into).run();
}

plan::Plan lower(const ir::TaskGraph& graph, int rank, const LowerContext& context) {
  return lower(DagIndex(graph), rank, context);
}

std::vector<int> symmetry_classes(const DagIndex& index) {
  const ir::TaskGraph& graph = index.graph();
  std::map<std::vector<int64_t>, int> classes;
  std::vector<int> class_of(static_cast<size_t>(index.num_ranks()));
  for (int rank = 0; rank < index.num_ranks(); ++rank) {
    const RankPlace place = place_of_rank(graph, rank);
    std::vector<int64_t> shape = {place.member, place.parts};
    for (ir::TaskId id : index.device_tasks(place.device)) {
      const ir::Task& task = graph.task(id);
      shape.insert(shape.end(), {static_cast<int64_t>(task.kind), static_cast<int64_t>(task.pass),
                                 task.microbatch, static_cast<int64_t>(task.ops.size()),
                                 static_cast<int64_t>(task.tensors.size())});
    }
    class_of[static_cast<size_t>(rank)] =
        classes.emplace(std::move(shape), static_cast<int>(classes.size())).first->second;
  }
  return class_of;
}

std::vector<int> symmetric_order(const std::vector<int>& classes) {
  std::vector<int> order(classes.size());
  for (size_t rank = 0; rank < order.size(); ++rank) order[rank] = static_cast<int>(rank);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return classes[static_cast<size_t>(a)] < classes[static_cast<size_t>(b)];
  });
  return order;
}

struct SymmetricLowering::Template {
  Template(const DagIndex& index, int rank, const LowerContext& context)
      : plan(google::protobuf::Arena::CreateMessage<plan::Plan>(&arena)),
        lowering(index, rank, context, *plan) {
    lowering.run();
  }
  google::protobuf::Arena arena;
  plan::Plan* plan;
  Lowering lowering;
  int symmetry_class = -1;
  bool checked = false;  // a specialised plan of it was compared with the rank's lowering
};

SymmetricLowering::SymmetricLowering(const DagIndex& index, const LowerContext& context,
                                     const std::vector<int>& classes)
    : index_(index), context_(context), classes_(classes) {}

SymmetricLowering::~SymmetricLowering() = default;

plan::Plan& SymmetricLowering::plan(int rank) {
  const int symmetry_class = classes_.at(static_cast<size_t>(rank));
  if (template_ && template_->symmetry_class == symmetry_class &&
      !unspecialisable_.count(symmetry_class)) {
    try {
      if (!template_->lowering.specialise(rank)) {
        // This rank's tasks differ from its class's: it is lowered alone and
        // the class's plan kept for the next.
        alone_ = std::make_unique<plan::Plan>(lower(index_, rank, context_));
        ++lowered_;
        return *alone_;
      }
      if (template_->checked) {
        ++specialised_;
        return *template_->plan;
      }
      // The first plan specialised from each lowering is compared with the rank's own: a class
      // whose ranks differ in a way specialise() does not rewrite is lowered rank by rank.
      const plan::Plan lowered = lower(index_, rank, context_);
      if (lowered.SerializeAsString() == template_->plan->SerializeAsString()) {
        template_->checked = true;
        ++specialised_;
        return *template_->plan;
      }
      unspecialisable_.insert(symmetry_class);
    } catch (...) {
      // NotSymmetric, or whatever else failed while specialising: lowering the rank from scratch
      // below throws again where the error is the rank's own.
      unspecialisable_.insert(symmetry_class);
    }
  }
  template_.reset();
  template_ = std::make_unique<Template>(index_, rank, context_);
  template_->symmetry_class = symmetry_class;
  ++lowered_;
  return *template_->plan;
}

}  // namespace piper::planner
