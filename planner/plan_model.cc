#include "planner/plan_model.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>

#include "formats/error.h"
#include "formats/onnx_model.h"
#include "formats/plan_file.h"
#include "planner/annotate.h"
#include "planner/autodiff/autodiff.h"
#include "planner/autodiff/optimizer.h"
#include "planner/directives/directive.h"
#include "planner/import/import.h"
#include "planner/ir/verify.h"
#include "planner/lower/lower.h"

namespace piper::planner {
namespace {

std::string new_plan_id() {
  std::random_device device;
  std::mt19937_64 generator(
      device() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::ostringstream id;
  id << std::hex << generator();
  return id.str();
}

void check_strategy(const strategy::Strategy& strategy) {
  if (strategy.precision != "fp32") {
    throw Error(strategy.source + ": $.precision: '" + strategy.precision +
                "' is not implemented yet; use \"fp32\"");
  }
}

ir::OpGraph training_graph(const std::string& model_path, const strategy::Strategy& strategy) {
  ImportOptions import_options;
  import_options.batch = strategy.global_batch;
  import_options.is_frozen = [&](const std::string& name) {
    for (const auto& pattern : strategy.frozen) {
      if (strategy::glob_match(pattern, name)) return true;
    }
    return false;
  };
  ir::OpGraph graph =
      import_model(formats::load_onnx_model(model_path), import_options, model_path);
  check_supported_ops(graph, model_path);
  annotate(graph, strategy.annotations, strategy.source);
  try {
    differentiate(graph);
  } catch (const Error& error) {
    throw Error(model_path + ": " + error.what());
  }
  add_optimizer(graph, strategy.optimizer);
  return graph;
}

}  // namespace

PlanningResult plan_model(const std::string& model_path, const strategy::Strategy& strategy,
                          const PlanningOptions& options) {
  check_strategy(strategy);
  ir::OpGraph ops = training_graph(model_path, strategy);
  const int num_ops = ops.num_ops();
  ir::TaskGraph graph = [&] {
    try {
      return ir::build_task_graph(std::move(ops));
    } catch (const std::invalid_argument& error) {
      throw Error(strategy.source + ": $.annotations: " + error.what());
    }
  }();
  if (options.verify) ir::verify_or_throw(graph, "after building the task DAG");
  for (const strategy::Directive& directive : strategy.directives) {
    const DirectiveContext context{directive, strategy.source};
    directive_pass(context)(graph, context);
    if (options.verify) ir::verify_or_throw(graph, "after " + context.where());
  }
  LowerContext lower_context;
  lower_context.plan_id = new_plan_id();
  lower_context.model_path = std::filesystem::absolute(model_path).lexically_normal().string();
  lower_context.global_batch = strategy.global_batch;
  lower_context.optimizer = strategy.optimizer;
  PlanningResult result;
  result.num_tasks = graph.num_tasks();
  result.num_ops = num_ops;
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    result.plans.push_back(lower(graph, rank, lower_context));
  }
  return result;
}

void write_plans(const std::vector<plan::Plan>& plans, const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path target = fs::absolute(dir).lexically_normal();
  const fs::path staging =
      target.parent_path() / (target.filename().string() + ".tmp." + std::to_string(::getpid()));
  std::error_code error;
  fs::remove_all(staging, error);
  fs::create_directories(staging, error);
  if (error) throw Error("cannot create '" + staging.string() + "': " + error.message());
  try {
    for (const plan::Plan& plan : plans) {
      formats::write_plan_file(
          (staging / ("rank" + std::to_string(plan.header().rank()) + ".plan")).string(), plan);
    }
    fs::remove_all(target, error);
    if (error) throw Error("cannot replace '" + target.string() + "': " + error.message());
    fs::rename(staging, target, error);
    if (error) throw Error("cannot write '" + target.string() + "': " + error.message());
  } catch (...) {
    fs::remove_all(staging, error);
    throw;
  }
}

}  // namespace piper::planner
