#include "planner/ir/op_graph.h"

#include <stdexcept>

namespace piper::ir {

std::string to_string(const Placement& placement) {
  switch (placement.kind) {
    case Placement::Kind::kReplicated:
      return "R";
    case Placement::Kind::kSharded:
      return "S(" + std::to_string(placement.dim) + ")";
    case Placement::Kind::kPartial:
      return "P";
  }
  return "?";
}

Placement parse_placement(const std::string& text) {
  if (text == "R") return Placement::replicated();
  if (text == "P") return Placement::partial();
  if (text.size() > 3 && text.rfind("S(", 0) == 0 && text.back() == ')') {
    const std::string digits = text.substr(2, text.size() - 3);
    if (digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 4) {
      return Placement::sharded(std::stoi(digits));
    }
  }
  throw std::invalid_argument("placement '" + text + "': expected R, P or S(DIM)");
}

TensorId OpGraph::add_tensor(Tensor tensor) {
  tensors_.push_back(std::move(tensor));
  return num_tensors() - 1;
}

OpId OpGraph::add_op(Op op) {
  ops_.push_back(std::move(op));
  return num_ops() - 1;
}

OpId OpGraph::insert_op(OpId position, Op op) {
  ops_.insert(ops_.begin() + position, std::move(op));
  return position;
}

std::optional<TensorId> OpGraph::find_tensor(const std::string& name) const {
  for (TensorId id = 0; id < num_tensors(); ++id) {
    if (tensors_[id].name == name) return id;
  }
  return std::nullopt;
}

void OpGraph::keep_roles_of(const OpGraph& source) {
  inputs = source.inputs;
  loss = source.loss;
  loss_seed = source.loss_seed;
  trained = source.trained;
  grad_norm = source.grad_norm;
  replica_group = source.replica_group;
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

bool reshards_over_replicas(const Op& op) {
  return attr_string(op.attributes, "over", "") == "replicas";
}

bool runs_over_replicas(const Op& op) {
  return reshards_over_replicas(op) || attr_string(op.attributes, "group", "") == "replicas";
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
