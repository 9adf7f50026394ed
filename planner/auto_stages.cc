#include "planner/auto_stages.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/error.h"
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

// Tags the forward ops of `graph` with stages 0 .. stages-1: op i goes to the
// stage its cost midpoint falls in, so runs are contiguous and of about
// equal cost.
std::vector<strategy::Annotation> balanced_stages(const ir::OpGraph& graph,
                                                  const strategy::PipelineDirective& pipeline,
                                                  const std::string& where) {
  const int64_t stages = static_cast<int64_t>(pipeline.devices.size()) * pipeline.chunks;
  const sim::DeviceRates rates;
  std::vector<double> costs;
  int64_t costly = 0;
  for (const ir::Op& op : graph.ops()) {
    costs.push_back(sim::op_seconds(graph, op, rates));
    costly += costs.back() > 0;
  }
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
    const auto stages = balanced_stages(graph, *pipeline, strategy.source + ": " + directive.path);
    resolved.annotations.insert(resolved.annotations.end(), stages.begin(), stages.end());
    pipeline->auto_stages = false;
    directive.json = strategy::to_json(directive);
  }
  return resolved;
}

}  // namespace piper::planner
