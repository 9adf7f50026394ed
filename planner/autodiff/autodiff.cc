#include "planner/autodiff/autodiff.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "formats/error.h"
#include "planner/autodiff/rules/rules.h"
#include "planner/autodiff/unsupported_ops.h"

namespace piper::planner {
namespace {

// Tensors the loss's gradient must flow through: float values that depend
// on a trained parameter.
std::vector<bool> requiring_gradients(const ir::OpGraph& graph) {
  std::vector<bool> needs(graph.num_tensors(), false);
  for (ir::TensorId id = 0; id < graph.num_tensors(); ++id) {
    needs[id] = graph.tensor(id).role == ir::Role::kParameter;
  }
  for (const ir::Op& op : graph.ops()) {
    const bool any = std::any_of(op.inputs.begin(), op.inputs.end(),
                                 [&](ir::TensorId in) { return in >= 0 && needs[in]; });
    for (ir::TensorId out : op.outputs) {
      if (out >= 0) needs[out] = any && ir::is_float(graph.tensor(out).dtype);
    }
  }
  return needs;
}

class Differentiator {
 public:
  explicit Differentiator(ir::OpGraph& graph)
      : graph_(graph),
        needs_gradient_(requiring_gradients(graph)),
        contributions_(graph.num_tensors()) {}

  void run() {
    const ir::TensorId loss = graph_.loss;
    if (!needs_gradient_[loss]) {
      throw Error("the loss '" + graph_.tensor(loss).name +
                  "' does not depend on any trained parameter; nothing to train");
    }
    graph_.loss_seed = seed(loss);
    contributions_[loss].push_back(graph_.loss_seed);
    const int forward_ops = graph_.num_ops();
    for (ir::OpId id = forward_ops - 1; id >= 0; --id) differentiate_op(id);
    for (ir::TensorId id = 0; id < static_cast<ir::TensorId>(needs_gradient_.size()); ++id) {
      if (graph_.tensor(id).role == ir::Role::kParameter) finish_parameter(id);
    }
  }

 private:
  ir::TensorId seed(ir::TensorId loss) {
    ir::Tensor ones;
    ones.name = "grad/" + graph_.tensor(loss).name;
    ones.shape = graph_.tensor(loss).shape;
    ones.role = ir::Role::kConstant;
    const float one = 1.0f;
    ones.data.resize(sizeof(float));
    std::memcpy(ones.data.data(), &one, sizeof(float));
    return graph_.add_tensor(std::move(ones));
  }

  void differentiate_op(ir::OpId id) {
    const ir::Op op = graph_.op(id);
    GradientBuilder builder(graph_, id);
    bool flows = false;
    for (ir::TensorId out : op.outputs) {
      const ir::TensorId gradient = out >= 0 ? total_gradient(out, op) : -1;
      builder.output_gradients_.push_back(gradient);
      flows = flows || gradient >= 0;
    }
    for (ir::TensorId in : op.inputs) builder.wanted_.push_back(in >= 0 && needs_gradient_[in]);
    const bool wanted =
        std::find(builder.wanted_.begin(), builder.wanted_.end(), true) != builder.wanted_.end();
    if (!flows || !wanted) return;
    const auto rule = gradient_rules().find(op.type);
    if (rule == gradient_rules().end()) {
      throw Error("node '" + op.name + "' (" + op.type + ") has no gradient rule in Piper");
    }
    rule->second(builder);
    for (const auto& [index, gradient] : builder.contributions_) {
      contributions_.resize(graph_.num_tensors());
      contributions_[op.inputs[index]].push_back(gradient);
    }
  }

  // The sum of every contribution to `tensor`'s gradient, or -1 when none.
  ir::TensorId total_gradient(ir::TensorId tensor, const ir::Op& producer) {
    std::vector<ir::TensorId>& parts = contributions_[tensor];
    if (parts.empty()) return -1;
    if (parts.size() == 1) return parts[0];
    ir::Tensor sum;
    sum.name = "grad/" + graph_.tensor(tensor).name;
    sum.dtype = graph_.tensor(tensor).dtype;
    sum.shape = graph_.tensor(tensor).shape;
    const ir::TensorId out = graph_.add_tensor(std::move(sum));
    ir::Op op;
    op.type = "Sum";
    op.name = graph_.tensor(out).name;
    op.inputs = parts;
    op.outputs = {out};
    op.pass = ir::Pass::kBackward;
    op.tags = producer.tags;
    graph_.add_op(std::move(op));
    contributions_.resize(graph_.num_tensors());
    contributions_[tensor] = {out};
    return out;
  }

  void finish_parameter(ir::TensorId parameter) {
    if (contributions_[parameter].empty()) return;  // does not reach the loss
    ir::Op first_use;
    for (const ir::Op& op : graph_.ops()) {
      if (std::find(op.inputs.begin(), op.inputs.end(), parameter) != op.inputs.end()) {
        first_use = op;
        break;
      }
    }
    ir::TensorId gradient = total_gradient(parameter, first_use);
    // A gradient that is a constant or shared tensor gets its own copy, so the
    // parameter's gradient is a distinct tensor the optimizer (and later
    // reductions) can own.
    if (graph_.tensor(gradient).role != ir::Role::kActivation || is_used_elsewhere(gradient)) {
      ir::Tensor copy;
      copy.dtype = graph_.tensor(parameter).dtype;
      copy.shape = graph_.tensor(parameter).shape;
      const ir::TensorId out = graph_.add_tensor(std::move(copy));
      ir::Op op;
      op.type = "Identity";
      op.inputs = {gradient};
      op.outputs = {out};
      op.pass = ir::Pass::kBackward;
      op.tags = first_use.tags;
      graph_.add_op(std::move(op));
      gradient = out;
    }
    ir::Tensor& tensor = graph_.tensor(gradient);
    tensor.name = "grad/" + graph_.tensor(parameter).name;
    tensor.role = ir::Role::kGradient;
    graph_.op(graph_.producer(gradient)).name = tensor.name;
    graph_.trained.push_back({parameter, gradient, {}});
  }

  bool is_used_elsewhere(ir::TensorId tensor) const { return !graph_.consumers(tensor).empty(); }

  ir::OpGraph& graph_;
  std::vector<bool> needs_gradient_;
  std::vector<std::vector<ir::TensorId>> contributions_;
};

}  // namespace

void differentiate(ir::OpGraph& graph) { Differentiator(graph).run(); }

std::vector<std::string> supported_op_types() {
  std::vector<std::string> types;
  for (const auto& [type, rule] : gradient_rules()) types.push_back(type);
  return types;
}

void check_supported_ops(const ir::OpGraph& graph, const std::string& model_name) {
  // Every unsupported type at once, in the order the model first uses them, so one run
  // shows all the user has to change.
  struct Use {
    int count = 0;
    std::string first;
  };
  const auto& rules = gradient_rules();
  std::vector<std::string> order;
  std::map<std::string, Use> uses;
  for (const ir::Op& op : graph.ops()) {
    if (rules.count(op.type)) continue;
    Use& use = uses[op.type];
    if (use.count++ == 0) {
      use.first = op.name;
      order.push_back(op.type);
    }
  }
  if (order.empty()) return;
  std::string message = model_name + ": " + std::to_string(order.size()) + " op type" +
                        (order.size() == 1 ? " is" : "s are") + " not supported by Piper:";
  for (const std::string& type : order) {
    const Use& use = uses.at(type);
    message += "\n  " + type + " (" + std::to_string(use.count) + " node" +
               (use.count == 1 ? "" : "s") + ", first '" + use.first +
               "'): " + unsupported_op_advice(type);
  }
  std::string supported;
  for (const auto& type : supported_op_types()) {
    supported += (supported.empty() ? "" : ", ") + type;
  }
  throw Error(message + "\nsupported op types: " + supported);
}

}  // namespace piper::planner
