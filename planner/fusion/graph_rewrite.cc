#include "planner/fusion/graph_rewrite.h"

namespace piper::planner {

ir::OpGraph rebuild(const ir::OpGraph& graph, std::vector<KeptOp> ops) {
  std::vector<bool> used(graph.num_tensors(), false);
  const auto mark = [&](const std::vector<ir::TensorId>& ids) {
    for (ir::TensorId t : ids) {
      if (t >= 0) used[t] = true;
    }
  };
  for (const KeptOp& kept : ops) {
    mark(kept.op.inputs);
    mark(kept.op.outputs);
  }
  mark(graph.inputs);
  used[graph.loss] = true;

  ir::OpGraph result;
  std::vector<ir::TensorId> renumbered(graph.num_tensors(), -1);
  for (ir::TensorId t = 0; t < graph.num_tensors(); ++t) {
    if (used[t]) renumbered[t] = result.add_tensor(graph.tensor(t));
  }
  const auto renumber = [&](std::vector<ir::TensorId>& ids) {
    for (ir::TensorId& t : ids) t = t < 0 ? -1 : renumbered[t];
  };
  for (ir::TensorId t = 0; t < result.num_tensors(); ++t) {
    ir::Tensor& tensor = result.tensor(t);
    for (ir::DynamicDim& dim : tensor.dynamic) dim.extent = renumbered.at(dim.extent);
    if (tensor.label_count.labels >= 0) {
      tensor.label_count.labels = renumbered.at(tensor.label_count.labels);
    }
  }
  for (KeptOp& kept : ops) {
    renumber(kept.op.inputs);
    renumber(kept.op.outputs);
    for (auto& [index, tensor] : kept.new_constants) {
      kept.op.inputs.at(index) = result.add_tensor(std::move(tensor));
    }
    result.add_op(std::move(kept.op));
  }
  result.inputs = graph.inputs;
  renumber(result.inputs);
  result.loss = renumbered[graph.loss];
  return result;
}

}  // namespace piper::planner
