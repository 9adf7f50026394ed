// recompute: activation checkpointing at task granularity. A matched forward
// task F keeps only what it reads from elsewhere (its inputs from other tasks,
// parameters, constants, batch inputs: the checkpoint); the tensors it writes
// for the backward are rebuilt by a recompute task R, which runs clones of just
// the ops of F that lead to them, just before the backward that reads them.
//
// Contracts:
//  - Tasks that run the same ops (the microbatches of one task) share R's op
//    clones; every microbatch of a matched task must be matched.
//  - A tensor of F is recomputed when backward tasks read it and nothing else
//    outside F does (a forward task, a transfer, the loss): what other tasks
//    read stays alive anyway and is read as it is.
//  - Dropout is not drawn again: R rebuilds its output from the mask the
//    forward saved, with piper.DropoutGrad (Y = X · mask · scale, the same
//    arithmetic as the forward), so the recomputed values equal the forward's
//    bit for bit; the mask (one byte an element) is kept like a checkpoint.
//    Other random ops are refused.
//  - R runs after everything else its backward waits for on its devices
//    (temporal edges), and must share its devices with that backward.
//  - A matched task none of whose tensors a backward reads is skipped.
//  - ZeRO-3 (recompute after replicate): parameters the forward read through
//    an all-gather are gathered again for R, just before it.
#include <algorithm>
#include <map>
#include <set>

#include "formats/error.h"
#include "planner/directives/directive.h"
#include "planner/directives/transfers.h"

namespace piper::planner {
namespace {

bool is_backward(ir::Pass pass) {
  return pass == ir::Pass::kBackward || pass == ir::Pass::kBackwardInput ||
         pass == ir::Pass::kBackwardWeight;
}

bool is_random(const std::string& type) {
  return type == "RandomNormal" || type == "RandomUniform" || type == "RandomNormalLike" ||
         type == "RandomUniformLike" || type == "Bernoulli" || type == "Multinomial";
}

bool contains(const std::vector<int>& items, int item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// What the recompute of one op list is, shared by the tasks running it.
struct Recipe {
  std::vector<ir::OpId> ops;                        // R's ops, in execution order
  std::map<ir::TensorId, ir::TensorId> recomputed;  // F's tensor -> R's copy
  std::map<ir::TensorId, ir::TensorId> regathered;  // gathered parameter -> R's gather
  std::set<ir::TensorId> external;                  // what R reads that it does not write
  std::set<ir::OpId> rewired;                       // backward ops now reading R's copies
};

class Recomputation {
 public:
  Recomputation(ir::TaskGraph& graph, const DirectiveContext& context)
      : graph_(graph),
        context_(context),
        spec_(std::get<strategy::RecomputeDirective>(context.directive.spec)) {}

  void run() {
    index();
    std::map<std::vector<ir::OpId>, std::vector<ir::TaskId>> selected;
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const ir::Task& task = graph_.task(id);
      if (task.kind == ir::TaskKind::kCompute && task.pass == ir::Pass::kForward &&
          selects(spec_.filter, task)) {
        selected[task.ops].push_back(id);
      }
    }
    if (selected.empty()) {
      throw Error(context_.where("filter") + ": the filter selects no forward task");
    }
    for (const auto& [task_ops, tasks] : selected) {
      check_every_microbatch(task_ops, tasks);
      const Recipe recipe = make_recipe(tasks.front());
      if (recipe.ops.empty()) continue;
      for (ir::TaskId forward : tasks) add_recompute_task(forward, recipe);
    }
  }

 private:
  ir::OpGraph& ops() { return graph_.op_graph(); }

  // Which tasks run each op, and which ops and transfers read each tensor, as
  // the DAG stood before this directive.
  void index() {
    tasks_of_op_.assign(ops().num_ops(), {});
    consumers_.assign(ops().num_tensors(), {});
    moved_by_transfer_.assign(ops().num_tensors(), false);
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      const ir::Task& task = graph_.task(id);
      for (ir::OpId op : task.ops) tasks_of_op_[op].push_back(id);
      for (ir::TensorId tensor : task.tensors) moved_by_transfer_[tensor] = true;
    }
    for (ir::OpId op = 0; op < ops().num_ops(); ++op) {
      for (ir::TensorId input : ops().op(op).inputs) {
        if (input >= 0) consumers_[input].push_back(op);
      }
    }
  }

  void check_every_microbatch(const std::vector<ir::OpId>& task_ops,
                              const std::vector<ir::TaskId>& tasks) {
    for (ir::TaskId id = 0; id < graph_.num_tasks(); ++id) {
      if (graph_.task(id).ops == task_ops && !contains(tasks, id)) {
        throw Error(context_.where("filter") + ": the filter selects " +
                    graph_.describe(tasks.front()) + " but not " + graph_.describe(id) +
                    ", which runs the same ops in another microbatch; recompute every "
                    "microbatch of a task alike (\"MB\": \"*\")");
      }
    }
  }

  // How a tensor F writes is read outside F.
  struct Readers {
    bool backward = false;  // by a backward task
    bool other = false;     // by anything else: a forward or update task, a transfer
  };

  Readers readers(ir::TensorId tensor, const std::vector<ir::OpId>& task_ops) const {
    Readers found;
    found.other = moved_by_transfer_[tensor];
    for (ir::OpId op : consumers_[tensor]) {
      if (contains(task_ops, op)) continue;
      for (ir::TaskId id : tasks_of_op_[op]) {
        (is_backward(graph_.task(id).pass) ? found.backward : found.other) = true;
      }
    }
    return found;
  }

  static bool is_dropout_mask(const ir::Op& op, ir::TensorId tensor) {
    return op.type == "Dropout" && op.outputs.size() > 1 && op.outputs[1] == tensor;
  }

  Recipe make_recipe(ir::TaskId forward) {
    const std::vector<ir::OpId> task_ops = graph_.task(forward).ops;
    // Tensors of F that stay as they are, and those R rebuilds for the backward.
    std::set<ir::TensorId> kept;
    std::set<ir::TensorId> wanted;
    std::map<ir::TensorId, ir::OpId> writer;
    for (ir::OpId op : task_ops) {
      for (ir::TensorId tensor : ops().op(op).outputs) {
        if (tensor < 0) continue;
        writer[tensor] = op;
        const Readers read = readers(tensor, task_ops);
        if (is_dropout_mask(ops().op(op), tensor) ||
            ops().tensor(tensor).role != ir::Role::kActivation || (read.backward && read.other)) {
          kept.insert(tensor);
        } else if (read.backward) {
          wanted.insert(tensor);
        }
      }
    }
    Recipe recipe;
    if (wanted.empty()) return recipe;
    // The ops that rebuild `wanted` from what F reads and what stays.
    std::set<ir::OpId> needed;
    std::vector<ir::TensorId> work(wanted.begin(), wanted.end());
    while (!work.empty()) {
      const ir::TensorId tensor = work.back();
      work.pop_back();
      const auto found = writer.find(tensor);
      if (found == writer.end() || kept.count(tensor) || !needed.insert(found->second).second) {
        continue;
      }
      const ir::Op& op = ops().op(found->second);
      check_replayable(op, forward);
      const size_t read = op.type == "Dropout" ? 1 : op.inputs.size();  // only the data
      for (size_t i = 0; i < read; ++i) {
        if (op.inputs[i] >= 0) work.push_back(op.inputs[i]);
      }
    }
    for (ir::OpId op : task_ops) {
      if (needed.count(op)) recipe.ops.push_back(clone(op, recipe));
    }
    for (ir::OpId op : recipe.ops) {
      for (ir::TensorId input : ops().op(op).inputs) {
        if (input >= 0 && !is_written_by(recipe, input)) recipe.external.insert(input);
      }
    }
    regather_parameters(forward, recipe);
    rewire_backward(wanted, recipe);
    return recipe;
  }

  bool is_written_by(const Recipe& recipe, ir::TensorId tensor) {
    for (ir::OpId op : recipe.ops) {
      if (contains(ops().op(op).outputs, tensor)) return true;
    }
    return false;
  }

  void check_replayable(const ir::Op& op, ir::TaskId forward) {
    if (is_random(op.type)) {
      throw Error(context_.where() + ": " + op.type + " \"" + op.name + "\" in " +
                  graph_.describe(forward) +
                  " draws random values that a recompute cannot draw again; leave this task "
                  "out of the filter");
    }
    if (op.type == "Dropout" && (op.outputs.size() < 2 || op.outputs[1] < 0)) {
      throw Error(context_.where() + ": Dropout \"" + op.name + "\" in " +
                  graph_.describe(forward) +
                  " saves no mask, so its output cannot be rebuilt as the forward drew it; "
                  "leave this task out of the filter");
    }
  }

  // A copy of `op` writing new "<name>/recomputed" tensors and reading the
  // copies made so far. Dropout becomes piper.DropoutGrad over the saved mask.
  ir::OpId clone(ir::OpId original, Recipe& recipe) {
    ir::Op op = ops().op(original);
    op.name += "/recomputed";
    op.pass = kRecomputePass;
    if (op.type == "Dropout") {
      // Dropout(X[, ratio[, training_mode]]) -> (Y, mask) becomes
      // DropoutGrad(X, mask[, ratio[, training_mode]]) -> Y.
      std::vector<ir::TensorId> inputs = {op.inputs[0], op.outputs[1]};
      inputs.insert(inputs.end(), op.inputs.begin() + 1, op.inputs.end());
      op.type = "piper.DropoutGrad";
      op.inputs = inputs;
      op.outputs.resize(1);
      op.attributes.clear();
    }
    for (ir::TensorId& input : op.inputs) {
      const auto copy = recipe.recomputed.find(input);
      if (copy != recipe.recomputed.end()) input = copy->second;
    }
    for (ir::TensorId& output : op.outputs) {
      if (output < 0) continue;
      ir::Tensor tensor = ops().tensor(output);
      tensor.name += "/recomputed";
      tensor.role = ir::Role::kActivation;
      tensor.accumulated = false;
      const ir::TensorId copy = ops().add_tensor(std::move(tensor));
      recipe.recomputed[output] = copy;
      output = copy;
    }
    return ops().add_op(std::move(op));
  }

  // ZeRO-3 frees a gathered parameter after the task that read it: R gathers
  // the ones it reads again, into tensors of its own.
  void regather_parameters(ir::TaskId forward, Recipe& recipe) {
    for (ir::TaskId gather : predecessors(forward)) {
      const ir::Task& task = graph_.task(gather);
      if (task.kind != ir::TaskKind::kAllGather) continue;
      for (size_t i = 0; i + 1 < task.tensors.size(); i += 2) {
        const ir::TensorId shard = task.tensors[i];
        const ir::TensorId gathered = task.tensors[i + 1];
        if (!recipe.external.count(gathered) || ops().tensor(shard).role != ir::Role::kParameter) {
          continue;
        }
        ir::Tensor tensor = ops().tensor(gathered);
        tensor.name += "/recomputed";
        const ir::TensorId copy = ops().add_tensor(std::move(tensor));
        recipe.regathered[gathered] = copy;
        recipe.external.erase(gathered);
        for (ir::OpId op : recipe.ops) {
          for (ir::TensorId& input : ops().op(op).inputs) {
            if (input == gathered) input = copy;
          }
        }
      }
    }
  }

  // Backward ops read R's copies instead of F's tensors.
  void rewire_backward(const std::set<ir::TensorId>& wanted, Recipe& recipe) {
    for (ir::TensorId tensor : wanted) {
      for (ir::OpId op : consumers_[tensor]) {
        const auto& tasks = tasks_of_op_[op];
        if (tasks.empty() || !is_backward(graph_.task(tasks.front()).pass)) continue;
        for (ir::TensorId& input : ops().op(op).inputs) {
          if (input == tensor) input = recipe.recomputed.at(tensor);
        }
        recipe.rewired.insert(op);
      }
    }
  }

  std::vector<ir::TaskId> predecessors(ir::TaskId id) const {
    std::vector<ir::TaskId> found;
    for (const ir::Edge& edge : graph_.edges()) {
      if (edge.to == id && !contains(found, edge.from)) found.push_back(edge.from);
    }
    return found;
  }

  // Whether task `source` leaves `tensor` of microbatch `mb` where R runs.
  bool provides(ir::TaskId source, ir::TensorId tensor, int mb) {
    const ir::Task& task = graph_.task(source);
    if (ir::is_per_microbatch(ops(), tensor) && task.microbatch != mb) return false;
    if (task.kind == ir::TaskKind::kCompute) {
      const ir::OpId producer = ops().producer(tensor);
      return producer >= 0 && contains(task.ops, producer);
    }
    return task.kind != ir::TaskKind::kSend && contains(task.tensors, tensor);
  }

  bool is_always_available(ir::TensorId tensor) {
    const ir::Role role = ops().tensor(tensor).role;
    return ops().producer(tensor) < 0 &&
           (role == ir::Role::kParameter || role == ir::Role::kConstant ||
            role == ir::Role::kInput || role == ir::Role::kOptimizerState);
  }

  void add_recompute_task(ir::TaskId forward, const Recipe& recipe) {
    const ir::Task source = graph_.task(forward);
    ir::Task task;
    task.kind = ir::TaskKind::kCompute;
    task.tags = source.tags;
    task.pass = kRecomputePass;
    task.microbatch = source.microbatch;
    task.devices = source.devices;
    task.stream = source.stream;
    task.ops = recipe.ops;
    const ir::TaskId recompute = graph_.add_task(std::move(task));

    // Data edges from where R's inputs come from: F itself (Dropout masks) or
    // F's producers.
    std::vector<ir::TaskId> sources = predecessors(forward);
    sources.insert(sources.begin(), forward);
    std::map<ir::TaskId, std::vector<ir::TensorId>> regather;  // original gather -> pairs
    for (ir::TensorId tensor : recipe.external) {
      if (is_always_available(tensor)) continue;
      const auto from = std::find_if(sources.begin(), sources.end(), [&](ir::TaskId id) {
        return provides(id, tensor, source.microbatch);
      });
      if (from == sources.end()) {
        throw Error(context_.where() + ": " + graph_.describe(forward) + " reads '" +
                    ops().tensor(tensor).name +
                    "' from no task joined to it by a data edge; cannot recompute it");
      }
      graph_.add_edge(*from, recompute, ir::EdgeKind::kData);
    }
    for (const auto& [gathered, copy] : recipe.regathered) {
      for (ir::TaskId id : sources) {
        const ir::Task& gather = graph_.task(id);
        if (gather.kind != ir::TaskKind::kAllGather || !provides(id, gathered, source.microbatch))
          continue;
        const auto at = std::find(gather.tensors.begin(), gather.tensors.end(), gathered);
        regather[id].push_back(*(at - 1));
        regather[id].push_back(copy);
        break;
      }
    }
    std::vector<ir::TaskId> gathers;
    for (const auto& [original, pairs] : regather) {
      ir::Task gather = graph_.task(original);
      gather.pass = kRecomputePass;
      gather.microbatch = source.microbatch;
      gather.tensors = pairs;
      const ir::TaskId id = graph_.add_task(std::move(gather));
      graph_.add_edge(id, recompute, ir::EdgeKind::kData);
      gathers.push_back(id);
    }

    // R feeds the backward tasks of its microbatch that read its copies.
    std::vector<ir::TaskId> backward;
    for (ir::OpId op : recipe.rewired) {
      for (ir::TaskId id : tasks_of_op_[op]) {
        if (graph_.task(id).microbatch == source.microbatch && !contains(backward, id)) {
          backward.push_back(id);
        }
      }
    }
    const std::set<int> devices(source.devices.begin(), source.devices.end());
    for (ir::TaskId id : backward) {
      const auto& where = graph_.task(id).devices;
      if (std::set<int>(where.begin(), where.end()) != devices) {
        throw Error(context_.where() + ": " + graph_.describe(forward) + " and its backward " +
                    graph_.describe(id) +
                    " run on different devices; recompute needs both on the same ones");
      }
      graph_.add_edge(recompute, id, ir::EdgeKind::kData);
    }

    // Run late: after whatever else each of those backward tasks waits for
    // on these devices (the next layer's backward, say), so that the copies
    // live from just before the backward to its end. An edge from a task that
    // R itself precedes would close a cycle and is left out.
    const std::vector<bool> after = descendants(recompute);
    for (ir::TaskId id : backward) {
      for (ir::TaskId before : predecessors(id)) {
        const auto& where = graph_.task(before).devices;
        if (before == recompute || after[before] ||
            std::set<int>(where.begin(), where.end()) != devices) {
          continue;
        }
        graph_.add_edge(before, recompute, ir::EdgeKind::kWindow);
        for (ir::TaskId gather : gathers) {
          const auto& on = graph_.task(gather).devices;
          if (std::set<int>(on.begin(), on.end()) == devices) {
            graph_.add_edge(before, gather, ir::EdgeKind::kWindow);
          }
        }
      }
    }
  }

  std::vector<bool> descendants(ir::TaskId root) const {
    std::vector<std::vector<ir::TaskId>> successors(graph_.num_tasks());
    for (const ir::Edge& edge : graph_.edges()) successors[edge.from].push_back(edge.to);
    std::vector<bool> seen(graph_.num_tasks(), false);
    std::vector<ir::TaskId> work = {root};
    while (!work.empty()) {
      const ir::TaskId id = work.back();
      work.pop_back();
      for (ir::TaskId next : successors[id]) {
        if (!seen[next]) {
          seen[next] = true;
          work.push_back(next);
        }
      }
    }
    return seen;
  }

  // R belongs to the backward: an `order` filter naming {..., "PASS": "B"}
  // puts it in the group of the backward it feeds (their data edge orders the
  // two), whereas a forward pass would put it among the forwards, before the
  // later layers' backwards that it must follow, and make the order
  // contradict it.
  static constexpr ir::Pass kRecomputePass = ir::Pass::kBackward;

  ir::TaskGraph& graph_;
  const DirectiveContext& context_;
  const strategy::RecomputeDirective& spec_;
  std::vector<std::vector<ir::TaskId>> tasks_of_op_;
  std::vector<std::vector<ir::OpId>> consumers_;
  std::vector<bool> moved_by_transfer_;
};

}  // namespace

void apply_recompute(ir::TaskGraph& graph, const DirectiveContext& context) {
  Recomputation(graph, context).run();
  // A recompute task on a later pipeline stage reads the stage's input,
  // which a recv brings.
  route_transfers(graph, context);
}

}  // namespace piper::planner
