#include "planner/autodiff/optimizer.h"

namespace piper::planner {
namespace {

ir::Attributes type_attributes(const strategy::Optimizer& optimizer) {
  if (optimizer.type == "adamw") {
    return {{"lr", optimizer.lr},
            {"beta1", optimizer.beta1},
            {"beta2", optimizer.beta2},
            {"eps", optimizer.eps},
            {"weight_decay", optimizer.weight_decay}};
  }
  return {{"lr", optimizer.lr},
          {"momentum", optimizer.momentum},
          {"dampening", optimizer.dampening},
          {"weight_decay", optimizer.weight_decay},
          {"nesterov", int64_t{optimizer.nesterov ? 1 : 0}}};
}

// The schedule and the clipping bound, written only when they change the update, so that the
// plans of strategies without them stay as they were.
ir::Attributes optimizer_attributes(const strategy::Optimizer& optimizer) {
  ir::Attributes attributes = type_attributes(optimizer);
  const formats::LrSchedule& schedule = optimizer.lr_schedule;
  if (schedule != formats::LrSchedule{}) {
    attributes["lr_schedule"] = schedule.type;
    attributes["warmup_steps"] = schedule.warmup_steps;
    attributes["total_steps"] = schedule.total_steps;
    attributes["min_lr_ratio"] = schedule.min_lr_ratio;
  }
  if (optimizer.clip_grad_norm > 0) attributes["clip_grad_norm"] = optimizer.clip_grad_norm;
  return attributes;
}

std::vector<std::string> state_names(const strategy::Optimizer& optimizer) {
  if (optimizer.type == "adamw") return {"exp_avg", "exp_avg_sq"};
  if (optimizer.momentum != 0) return {"momentum_buffer"};
  return {};
}

}  // namespace

void add_optimizer(ir::OpGraph& graph, const strategy::Optimizer& optimizer) {
  const ir::Attributes attributes = optimizer_attributes(optimizer);
  const std::string type = optimizer.type == "adamw" ? "piper.AdamW" : "piper.SGD";
  for (ir::TrainedParameter& trained : graph.trained) {
    const ir::Tensor parameter = graph.tensor(trained.parameter);
    for (const std::string& name : state_names(optimizer)) {
      ir::Tensor state;
      state.name = "optim/" + parameter.name + "/" + name;
      state.shape = parameter.shape;
      state.role = ir::Role::kOptimizerState;
      trained.state.push_back(graph.add_tensor(std::move(state)));
    }
    ir::Op update;
    update.type = type;
    update.name = "optim/" + parameter.name;
    update.inputs = {trained.parameter, trained.gradient};
    update.inputs.insert(update.inputs.end(), trained.state.begin(), trained.state.end());
    update.attributes = attributes;
    update.pass = ir::Pass::kUpdate;
    const auto consumers = graph.consumers(trained.parameter);
    if (!consumers.empty()) update.tags = graph.op(consumers.front()).tags;
    graph.add_op(std::move(update));
  }
}

}  // namespace piper::planner
