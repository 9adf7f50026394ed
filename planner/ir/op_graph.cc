#include "planner/ir/op_graph.h"

namespace piper::ir {

TensorId OpGraph::add_tensor(Tensor tensor) {
  tensors_.push_back(std::move(tensor));
  return num_tensors() - 1;
}

OpId OpGraph::add_op(Op op) {
  ops_.push_back(std::move(op));
  return num_ops() - 1;
}

std::optional<TensorId> OpGraph::find_tensor(const std::string& name) const {
  for (TensorId id = 0; id < num_tensors(); ++id) {
    if (tensors_[id].name == name) return id;
  }
  return std::nullopt;
}

OpId OpGraph::producer(TensorId tensor) const {
  for (OpId id = 0; id < num_ops(); ++id) {
    for (TensorId output : ops_[id].outputs) {
      if (output == tensor) return id;
    }
  }
  return -1;
}

std::vector<OpId> OpGraph::consumers(TensorId tensor) const {
  std::vector<OpId> result;
  for (OpId id = 0; id < num_ops(); ++id) {
    for (TensorId input : ops_[id].inputs) {
      if (input == tensor) {
        result.push_back(id);
        break;
      }
    }
  }
  return result;
}

bool is_per_microbatch(const OpGraph& graph, TensorId tensor) {
  switch (graph.tensor(tensor).role) {
    case Role::kParameter:
    case Role::kOptimizerState:
    case Role::kConstant:
    case Role::kGradient:  // parameter gradients accumulate over microbatches
      return false;
    default:
      return true;
  }
}

}  // namespace piper::ir
