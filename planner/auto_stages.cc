#include "planner/auto_stages.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/error.h"
#include "planner/autodiff/autodiff.h"
#include "planner/sim/cost_model.h"

namespace piper::planner {
namespace {

// A node name as a glob that matches only itself.
std::string literal_glob(const std::string& name) {
  std::string glob;
  for (char c : name) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') glob += '\\';
    glob += c;
  }
  return glob;
}

// A tag no annotation uses: each forward op's index, which autodiff copies onto the backward
// ops that differentiate it.
constexpr const char* kForwardOp = "piper.forward_op";

// Each forward op's time per microbatch at the default rates: its kernel, the kernels of the
// backward ops that differentiate it and, with microbatches, the piper.Accumulate that adds
// each gradient it produces into the parameter's (split.h). A pipeline's steady state repeats
// a forward and a backward per microbatch on every stage, so F + B is what stages balance:
// the ratio of B to F varies (a first layer computes no input gradient, a frozen layer no
// weight gradient, a loss little of either).
std::vector<double> forward_and_backward_seconds(ir::OpGraph graph, int64_t microbatches,
                                                 const std::string& model_path) {
  const int forward_ops = graph.num_ops();
  for (ir::OpId id = 0; id < forward_ops; ++id) graph.op(id).tags = {{kForwardOp, id}};
  check_supported_ops(graph, model_path);
  try {
    differentiate(graph);
  } catch (const Error& error) {
    throw Error(model_path + ": " + error.what());
  }
  const sim::DeviceRates rates;
  std::vector<double> seconds(static_cast<size_t>(forward_ops), 0.0);
  const auto add = [&](const ir::Op& op) {
    seconds.at(static_cast<size_t>(op.tags.at(kForwardOp))) += sim::op_seconds(graph, op, rates);
  };
  for (const ir::Op& op : graph.ops()) add(op);
  if (microbatches > 1) {
    for (const ir::TrainedParameter& trained : graph.trained) {
      ir::Op accumulate;
      accumulate.type = "piper.Accumulate";
      accumulate.inputs = accumulate.outputs = {trained.gradient};
      accumulate.tags = graph.op(graph.producer(trained.gradient)).tags;
      add(accumulate);
    }
  }
  return seconds;
}

// Tags the forward ops of `graph` with stages 0 .. stages-1: op i goes to the
// stage its forward-plus-backward cost midpoint falls in, so runs are contiguous and of
// about equal cost.
std::vector<strategy::Annotation> balanced_stages(const ir::OpGraph& graph,
                                                  const strategy::PipelineDirective& pipeline,
                                                  const std::string& model_path,
                                                  const std::string& where) {
  const int64_t stages = static_cast<int64_t>(pipeline.devices.size()) * pipeline.chunks;
  const std::vector<double> costs =
      forward_and_backward_seconds(graph, pipeline.num_microbatches, model_path);
  const auto costly = std::count_if(costs.begin(), costs.end(), [](double c) { return c > 0; });
  if (costly < stages) {
    throw Error(where + ".stages: the model has " + std::to_string(costly) +
                " ops that compute, too few for " + std::to_string(stages) +
                " stages; use fewer devices or tag the stages with annotations");
  }
  double total = 0;
  for (double cost : costs) total += cost;
  std::vector<strategy::Annotation> annotations;
  double before = 0;
  for (size_t i = 0; i < costs.size(); ++i) {
    const double middle = before + costs[i] / 2;
    before += costs[i];
    const ir::Op& op = graph.op(static_cast<ir::OpId>(i));
    if (op.name.empty()) continue;  // goes with its neighbours
    const auto stage = std::min<int64_t>(
        stages - 1, static_cast<int64_t>(std::floor(middle / total * static_cast<double>(stages))));
    annotations.push_back({literal_glob(op.name), {{pipeline.tag, stage}}});
  }
  return annotations;
}

}  // namespace

strategy::Strategy resolve_auto_stages(const std::string& model_path,
                                       const strategy::Strategy& strategy,
                                       const ImportOptions& options) {
  strategy::Strategy resolved = strategy;
  for (strategy::Directive& directive : resolved.directives) {
    auto* pipeline = std::get_if<strategy::PipelineDirective>(&directive.spec);
    if (pipeline == nullptr || !pipeline->auto_stages) continue;
    const ir::OpGraph graph = import_model(load_model_for_import(model_path), options, model_path);
    const auto stages =
        balanced_stages(graph, *pipeline, model_path, strategy.source + ": " + directive.path);
    resolved.annotations.insert(resolved.annotations.end(), stages.begin(), stages.end());
    pipeline->auto_stages = false;
    directive.json = strategy::to_json(directive);
  }
  return resolved;
}

}  // namespace piper::planner
