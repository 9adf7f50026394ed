// split: microbatching. Forward and backward tasks are cloned per
// microbatch; parameter gradients accumulate over microbatches and the loss
// seed becomes 1/M, so a step still trains on the mean over the global batch.
#include <cstring>
#include <map>

#include "formats/error.h"
#include "planner/directives/directive.h"

namespace piper::planner {
namespace {

// Each parameter gradient's producer now writes a per-microbatch partial
// that a piper.Accumulate op (in the same task) adds into the gradient.
void accumulate_gradients(ir::TaskGraph& graph) {
  ir::OpGraph& ops = graph.op_graph();
  for (const ir::TrainedParameter& trained : ops.trained) {
    const ir::OpId producer = ops.producer(trained.gradient);
    ir::Tensor partial = ops.tensor(trained.gradient);
    partial.name += "/microbatch";
    partial.role = ir::Role::kActivation;
    const ir::TensorId partial_id = ops.add_tensor(std::move(partial));
    for (ir::TensorId& output : ops.op(producer).outputs) {
      if (output == trained.gradient) output = partial_id;
    }
    ir::Op accumulate;
    accumulate.type = "piper.Accumulate";
    accumulate.name = ops.tensor(trained.gradient).name + "/accumulate";
    accumulate.inputs = {partial_id};
    accumulate.outputs = {trained.gradient};
    accumulate.pass = ops.op(producer).pass;
    accumulate.tags = ops.op(producer).tags;
    const ir::OpId accumulate_id = ops.add_op(std::move(accumulate));
    ops.tensor(trained.gradient).accumulated = true;
    for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
      auto& task_ops = graph.task(id).ops;
      for (size_t i = 0; i < task_ops.size(); ++i) {
        if (task_ops[i] == producer) {
          task_ops.insert(task_ops.begin() + static_cast<std::ptrdiff_t>(i) + 1, accumulate_id);
          break;
        }
      }
    }
  }
}

void scale_loss_seed(ir::OpGraph& ops, int64_t microbatches) {
  ir::Tensor& seed = ops.tensor(ops.loss_seed);
  const float value = 1.0f / static_cast<float>(microbatches);
  std::memcpy(seed.data.data(), &value, sizeof(float));
}

bool is_split_candidate(const ir::Task& task) {
  return task.kind == ir::TaskKind::kCompute && task.pass != ir::Pass::kUpdate;
}

}  // namespace

void apply_split(ir::TaskGraph& graph, const DirectiveContext& context) {
  const auto& spec = std::get<strategy::SplitDirective>(context.directive.spec);
  for (const ir::Task& task : graph.tasks()) {
    if (task.kind != ir::TaskKind::kCompute || task.microbatch != 0) {
      throw Error(context.where() +
                  ": split must come before directives that add transfers or other "
                  "microbatches; move it to the front of $.directives");
    }
    if (is_split_candidate(task) && !selects(spec.filter, task)) {
      throw Error(context.where("filter") +
                  ": every forward and backward task must be split alike, but the filter "
                  "leaves out " +
                  ir::to_string(task.tags) + " " + ir::to_string(task.pass) +
                  "; use the filter {}");
    }
  }
  const int64_t microbatches = spec.num_microbatches;
  if (microbatches == 1) return;
  accumulate_gradients(graph);
  scale_loss_seed(graph.op_graph(), microbatches);
  // clones[t][m]: task t's copy for microbatch m (t itself for m = 0).
  const int original = graph.num_tasks();
  std::vector<std::vector<ir::TaskId>> clones(original);
  for (ir::TaskId id = 0; id < original; ++id) {
    clones[id].push_back(id);
    if (!is_split_candidate(graph.task(id))) continue;
    for (int64_t m = 1; m < microbatches; ++m) {
      ir::Task copy = graph.task(id);
      copy.microbatch = static_cast<int>(m);
      clones[id].push_back(graph.add_task(std::move(copy)));
    }
  }
  const std::vector<ir::Edge> edges = graph.edges();
  for (const ir::Edge& edge : edges) {
    const auto& from = clones[edge.from];
    const auto& to = clones[edge.to];
    for (int64_t m = 1; m < microbatches; ++m) {
      const ir::TaskId source = from.size() > 1 ? from[m] : from[0];
      const ir::TaskId target = to.size() > 1 ? to[m] : to[0];
      graph.add_edge(source, target, edge.kind);
    }
  }
}

}  // namespace piper::planner
