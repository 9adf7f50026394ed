#include "planner/batch_means.h"

#include <algorithm>
#include <map>

#include "formats/error.h"
#include "planner/ir/replica_placements.h"

namespace piper::planner {
namespace {

// The axes a ReduceMean reduces (opset 17: its attribute; none is all).
std::vector<int64_t> reduced_axes(const ir::Op& op, int rank) {
  std::vector<int64_t> axes = ir::attr_ints(op.attributes, "axes");
  if (axes.empty()) {
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (int64_t& axis : axes) axis = axis < 0 ? axis + rank : axis;
  return axes;
}

// The forward ReduceMean ops over the rows of the batch, but the loss's own. A mean over the
// first dimension of data whose rows Piper lost track of could be one: refused.
std::vector<ir::OpId> batch_means(const ir::OpGraph& graph, const std::string& model_path) {
  const ir::ReplicaRows rows = ir::replica_placements(graph, true);
  std::vector<ir::OpId> found;
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    const ir::Op& op = graph.op(id);
    if (op.type != "ReduceMean" || op.pass != ir::Pass::kForward || op.outputs[0] == graph.loss) {
      continue;
    }
    const ir::TensorId input = op.inputs[0];
    const ir::Placement& x = rows.held.at(input);
    const auto rank = static_cast<int>(graph.tensor(input).shape.size());
    const std::vector<int64_t> axes = reduced_axes(op, rank);
    const auto reduces = [&](int64_t dim) { return std::count(axes.begin(), axes.end(), dim) > 0; };
    if (x.is_sharded() && reduces(x.dim) && rows.picked.at(input)) {
      throw Error(model_path + ": the node '" + op.name + "' takes a mean over the rows of '" +
                  graph.tensor(input).name +
                  "' that each replica picks from its own at run time, as many as it picks; "
                  "their mean over replicas is no mean over the whole batch. Train it on one "
                  "replica, or take the mean over every row");
    }
    if (x.is_sharded() && reduces(x.dim)) found.push_back(id);
    if (x.is_replicated() && rows.data.at(input) && reduces(0)) {
      throw Error(model_path + ": the node '" + op.name + "' takes a mean over the first " +
                  "dimension of '" + graph.tensor(input).name +
                  "', computed from the batch by ops Piper cannot follow row by row; if it "
                  "holds the batch's rows, each replica would average only its own. Train it "
                  "on one replica, or report the ops between the inputs and it");
    }
  }
  return found;
}

}  // namespace

void make_batch_means_global(ir::OpGraph& graph, int64_t replicas, int64_t microbatches,
                             const std::string& model_path, const std::string& strategy_source) {
  if (replicas == 1) return;
  const std::vector<ir::OpId> means = batch_means(graph, model_path);
  if (means.empty()) return;
  if (microbatches > 1) {
    throw Error(model_path + ": the node '" + graph.op(means.front()).name +
                "' takes a mean over the batch's rows that the loss reads, as MoE "
                "load-balancing losses and batch statistics do, but " +
                strategy_source +
                " splits the batch into microbatches, whose means Piper cannot combine ahead "
                "of the step; train without split (replicas average such means exactly)");
  }
  // Every reader of a mean reads its average over the replicas; the average follows the mean
  // in the op list, which stays in dataflow order.
  ir::OpGraph result;
  for (const ir::Tensor& tensor : graph.tensors()) result.add_tensor(tensor);
  std::map<ir::TensorId, ir::TensorId> averaged;
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    ir::Op op = graph.op(id);
    for (ir::TensorId& in : op.inputs) {
      const auto found = averaged.find(in);
      if (found != averaged.end()) in = found->second;
    }
    result.add_op(op);
    if (std::find(means.begin(), means.end(), id) == means.end()) continue;
    ir::Tensor average = graph.tensor(op.outputs[0]);
    average.name += "/replica_average";
    ir::Op all_reduce;
    all_reduce.type = "piper.AllReduce";
    all_reduce.name = op.name + "/replica_average";
    all_reduce.inputs = {op.outputs[0]};
    all_reduce.outputs = {result.add_tensor(std::move(average))};
    all_reduce.attributes = {{"group", std::string("replicas")}, {"average", int64_t{1}}};
    all_reduce.pass = op.pass;
    all_reduce.tags = op.tags;
    averaged[op.outputs[0]] = all_reduce.outputs[0];
    result.add_op(std::move(all_reduce));
  }
  result.keep_roles_of(graph);
  graph = std::move(result);
}

}  // namespace piper::planner
