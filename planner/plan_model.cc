#include "planner/plan_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "formats/atomic_file.h"
#include "formats/checksum.h"
#include "formats/error.h"
#include "formats/onnx_model.h"
#include "planner/annotate.h"
#include "planner/auto_stages.h"
#include "planner/autodiff/autodiff.h"
#include "planner/autodiff/op_dtypes.h"
#include "planner/autodiff/optimizer.h"
#include "planner/batch_means.h"
#include "planner/directives/directive.h"
#include "planner/directives/expand.h"
#include "planner/directives/transfers.h"
#include "planner/expert_exchanges.h"
#include "planner/fusion/fusion.h"
#include "planner/gradient_norm.h"
#include "planner/import/frozen.h"
#include "planner/import/import.h"
#include "planner/ir/dynamic_dims.h"
#include "planner/ir/verify.h"
#include "planner/lower/lower.h"
#include "planner/precision/precision.h"
#include "planner/sim/planned_timeline.h"
#include "planner/token_mean.h"

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

struct BatchParts {
  int64_t microbatches = 1;
  int64_t replicas = 1;
};

// The batch one task instance processes: the global batch over microbatches
// and replicas. Replicas made by `place` must be kept in sync by `replicate`.
int64_t planned_batch(const strategy::Strategy& strategy, BatchParts* parts_out = nullptr) {
  int64_t microbatches = 1;
  size_t replicas = 1;
  std::vector<int64_t> placed;
  for (const strategy::Directive& directive : strategy.directives) {
    if (const auto* split = std::get_if<strategy::SplitDirective>(&directive.spec)) {
      microbatches *= split->num_microbatches;
    } else if (const auto* replicate = std::get_if<strategy::ReplicateDirective>(&directive.spec)) {
      replicas = std::max(replicas, replicate->devices.size());
      placed.clear();
    } else if (const auto* place = std::get_if<strategy::PlaceDirective>(&directive.spec)) {
      if (place->devices.size() > 1) placed = place->devices;
    }
  }
  if (!placed.empty() && placed.size() > replicas) {
    throw Error(strategy.source + ": $.directives: tasks placed on " +
                std::to_string(placed.size()) +
                " devices are replicas; add a replicate directive over the same devices so "
                "they train as one model");
  }
  const int64_t parts = microbatches * static_cast<int64_t>(replicas);
  if (strategy.global_batch % parts != 0) {
    throw Error(strategy.source + ": $.batch.global: " + std::to_string(strategy.global_batch) +
                " samples do not divide into " + std::to_string(microbatches) +
                " microbatch(es) x " + std::to_string(replicas) +
                " replica(s); choose a multiple of " + std::to_string(parts));
  }
  if (parts_out != nullptr) *parts_out = {microbatches, static_cast<int64_t>(replicas)};
  return strategy.global_batch / parts;
}

// The devices a place, replicate or shard directive names (none for the others).
std::vector<int64_t> named_devices(const strategy::Directive& directive) {
  if (const auto* place = std::get_if<strategy::PlaceDirective>(&directive.spec)) {
    return place->devices;
  }
  if (const auto* replicate = std::get_if<strategy::ReplicateDirective>(&directive.spec)) {
    return replicate->devices;
  }
  std::vector<int64_t> devices;
  if (const auto* shard = std::get_if<strategy::ShardDirective>(&directive.spec)) {
    for (const auto& group : shard->groups)
      devices.insert(devices.end(), group.begin(), group.end());
  }
  return devices;
}

// Devices are ranks 0 to N-1, N one more than the largest device named: a
// gap would be a rank with nothing to do that must still be launched (and a
// stray large index, thousands of them), so the directive naming the largest
// device is refused before any planning.
void check_device_numbering(const strategy::Strategy& strategy) {
  std::set<int64_t> named;
  int64_t largest = -1;
  std::string largest_path;  // the directive naming it first
  for (const strategy::Directive& directive : strategy.directives) {
    const std::vector<int64_t> devices = named_devices(directive);
    if (devices.empty()) continue;
    named.insert(devices.begin(), devices.end());
    const int64_t top = *std::max_element(devices.begin(), devices.end());
    if (top > largest) {
      largest = top;
      largest_path = directive.path;
    }
  }
  if (static_cast<int64_t>(named.size()) == largest + 1) return;
  std::string missing;
  int listed = 0;
  for (int64_t device = 0; device < largest && listed < 5; ++device) {
    if (named.count(device)) continue;
    missing += (listed++ ? ", " : "") + std::to_string(device);
  }
  throw Error(strategy.source + ": " + largest_path + ".devices: device " +
              std::to_string(largest) + " makes " + std::to_string(largest + 1) +
              " ranks, but no directive names device(s) " + missing + (listed == 5 ? ", ..." : "") +
              "; number the devices 0, 1, ... without gaps");
}

// After every directive, each rank must run some computation: one that only
// relays or reports the loss is a device that a later place left behind.
void check_every_device_computes(const ir::TaskGraph& graph, const std::string& source) {
  std::vector<bool> computes(static_cast<size_t>(graph.world_size()));
  for (const ir::Task& task : graph.tasks()) {
    if (task.kind != ir::TaskKind::kCompute) continue;
    for (int device : task.devices) computes[static_cast<size_t>(device)] = true;
  }
  const auto idle = std::find(computes.begin(), computes.end(), false);
  if (idle == computes.end()) return;
  throw Error(source + ": $.directives: after every directive, device " +
              std::to_string(idle - computes.begin()) + " of devices 0 to " +
              std::to_string(computes.size() - 1) +
              " runs no task; place work on every device, or number the devices without gaps");
}

// How the model is imported for `strategy` (expanded): its frozen
// initializers, and the batch of one task instance.
ImportOptions import_options(const strategy::Strategy& strategy) {
  ImportOptions options;
  options.batch = planned_batch(strategy);
  options.is_frozen = [frozen = strategy.frozen](const std::string& name) {
    return std::any_of(frozen.begin(), frozen.end(), [&](const std::string& pattern) {
      return strategy::glob_match(pattern, name);
    });
  };
  return options;
}

// Gradients, casts and recomputed copies of tensors with a run-time extent carry it too.
void infer_run_time_extents(ir::OpGraph& graph, const std::string& model_path) {
  try {
    ir::infer_dynamic_dims(graph);
  } catch (const Error& error) {
    throw Error(model_path + ": " + error.what());
  }
}

// The tag numbering the experts of a shard directive of style "expert" (empty without one).
std::string expert_tag(const strategy::Strategy& strategy) {
  for (const strategy::Directive& directive : strategy.directives) {
    const auto* shard = std::get_if<strategy::ShardDirective>(&directive.spec);
    if (shard && shard->style == "expert") return shard->tag.value_or("");
  }
  return "";
}

ir::OpGraph training_graph(const std::string& model_path, const strategy::Strategy& strategy,
                           const PlanningOptions& options, PlanningResult& result) {
  onnx::ModelProto model = load_model_for_import(model_path, &result.external_files);
  result.frozen = match_frozen(model, strategy.frozen, strategy.source);
  ir::OpGraph graph = import_model(std::move(model), import_options(strategy), model_path);
  check_supported_ops(graph, model_path);
  check_op_dtypes(graph, model_path);
  make_token_means_global(graph, strategy.global_batch / planned_batch(strategy), model_path,
                          strategy.source);
  annotate(graph, strategy.annotations, strategy.source, expert_tag(strategy));
  if (options.fuse) result.fusions = fuse(graph, default_fusion_rules());
  if (strategy.precision == "bf16") result.bf16_casts = insert_bf16_casts(graph);
  try {
    differentiate(graph);
  } catch (const Error& error) {
    throw Error(model_path + ": " + error.what());
  }
  add_optimizer(graph, strategy.optimizer);
  BatchParts parts;
  planned_batch(strategy, &parts);
  make_batch_means_global(graph, parts.replicas, parts.microbatches, model_path, strategy.source);
  if (strategy.precision == "tf32") allow_tf32(graph);
  infer_run_time_extents(graph, model_path);
  if (const std::string tag = expert_tag(strategy); !tag.empty()) mark_experts(graph, tag);
  return graph;
}

// The DAG's device that rank `rank` runs: its tensor-parallel group's, or its own.
int device_of_rank(const ir::TaskGraph& graph, int rank) {
  for (size_t g = 0; g < graph.shard_groups.size(); ++g) {
    const auto& group = graph.shard_groups[g];
    if (std::find(group.begin(), group.end(), rank) != group.end()) return static_cast<int>(g);
  }
  return rank;
}

}  // namespace

strategy::Strategy expand_strategy(const std::string& model_path,
                                   const strategy::Strategy& written) {
  return expand_generators(
      resolve_auto_stages(model_path, written, import_options(expand_generators(written))));
}

namespace {

// `graph` with expert parallelism's exchanges as tasks of their own on communication streams
// (expert_exchanges.h), verified: the DAG lowered. None when `graph` holds no exchange: it is
// lowered as it is, and a large DAG is not held twice.
std::optional<ir::TaskGraph> with_exchanges_apart(const ir::TaskGraph& graph) {
  if (!has_expert_exchanges(graph)) return std::nullopt;
  ir::TaskGraph lowered = graph;
  separate_expert_exchanges(lowered);
  ir::verify_or_throw(lowered, "after separating the expert exchanges");
  return lowered;
}

}  // namespace

struct RankPlans::State {
  State(ir::TaskGraph planned, LowerContext context, const sim::DeviceRates& rates)
      : simulated(std::move(planned)),
        timeline(simulated, rates),
        apart(with_exchanges_apart(simulated)),
        index(apart ? *apart : simulated),
        classes(symmetry_classes(index)),
        order(symmetric_order(classes)),
        lower_context(std::move(context)) {
    lower_context.memory_plans = &memory_plans;
  }
  // The DAG whose step the cost model simulates, each expert exchange inside its task (priced
  // as a reshard the overlapped partner hides); planned_tasks name its tasks.
  const ir::TaskGraph simulated;
  const sim::PlannedTimeline timeline;  // every member of a tensor-parallel group gets its device's
  // The DAG lowered where it differs from `simulated`: that with its exchanges apart.
  const std::optional<ir::TaskGraph> apart;
  const DagIndex index;
  const std::vector<int> classes;           // each rank's symmetry class
  const std::vector<int> order;             // the ranks, by class
  mutable MemoryPlanCache memory_plans;     // ranks that differ only in a mesh coordinate share one
  mutable std::atomic<int> lowered{0};      // plans source()s lowered
  mutable std::atomic<int> specialised{0};  // and specialised
  LowerContext lower_context;
};

plan::Plan RankPlans::plan(int rank) const {
  plan::Plan plan;
  this->plan(rank, plan);
  return plan;
}

void RankPlans::plan(int rank, plan::Plan& into) const {
  lower(state_->index, rank, state_->lower_context, into);
  state_->timeline.add_to(into, device_of_rank(state_->simulated, rank));
}

const std::vector<int>& RankPlans::order() const { return state_->order; }

int RankPlans::lowered() const { return state_->lowered; }

int RankPlans::specialised() const { return state_->specialised; }

std::function<const plan::Plan&(int rank)> RankPlans::source() const {
  auto lowering =
      std::make_shared<SymmetricLowering>(state_->index, state_->lower_context, state_->classes);
  return [state = state_, lowering](int rank) -> const plan::Plan& {
    const int specialised = lowering->specialised();
    plan::Plan& plan = lowering->plan(rank);
    ++(lowering->specialised() > specialised ? state->specialised : state->lowered);
    state->timeline.add_to(plan, device_of_rank(state->simulated, rank));
    return plan;
  };
}

PlanningResult plan_ranks(const std::string& model_path, const strategy::Strategy& written,
                          const PlanningOptions& options) {
  const strategy::Strategy strategy = expand_strategy(model_path, written);
  check_device_numbering(strategy);
  PlanningResult result;
  ir::OpGraph ops = training_graph(model_path, strategy, options, result);
  const int num_ops = ops.num_ops();
  ir::TaskGraph graph = [&] {
    try {
      return ir::build_task_graph(std::move(ops));
    } catch (const std::invalid_argument& error) {
      throw Error(strategy.source + ": $.annotations: " + error.what());
    }
  }();
  if (options.verify) ir::verify_or_throw(graph, "after building the task DAG");
  const strategy::Strategy grouped = on_shard_groups(strategy);
  const auto is_replicate = [&](size_t i) {
    return i < grouped.directives.size() &&
           std::holds_alternative<strategy::ReplicateDirective>(grouped.directives[i].spec);
  };
  for (size_t i = 0; i < grouped.directives.size(); ++i) {
    DirectiveContext context{grouped.directives[i], strategy.source};
    // Unverified, replicates in a row route once, after the last: each route removes every
    // transfer and makes them anew from the compute tasks, which replicate alone reads, so
    // the DAG is the same (PlanModelVerify's tests).
    context.route_transfers = options.verify || !(is_replicate(i) && is_replicate(i + 1));
    directive_pass(context)(graph, context);
    if (options.verify) ir::verify_or_throw(graph, "after " + context.where());
  }
  infer_run_time_extents(graph.op_graph(), model_path);
  check_replica_counts(graph, strategy.source);
  check_every_device_computes(graph, strategy.source);
  add_gradient_norm(graph);
  ir::verify_or_throw(graph, "after adding the gradient norm");
  LowerContext lower_context;
  lower_context.plan_id = new_plan_id();
  lower_context.model_path = std::filesystem::absolute(model_path).lexically_normal().string();
  lower_context.model_checksum = formats::fnv1a64(formats::read_file(model_path));
  for (const formats::ExternalFile& file : result.external_files) {
    lower_context.external_files.push_back(formats::to_plan(file));
  }
  lower_context.global_batch = strategy.global_batch;
  lower_context.optimizer = strategy.optimizer;
  result.num_tasks = graph.num_tasks();
  result.num_ops = num_ops;
  auto ranks = std::make_shared<RankPlans>();
  ranks->num_ranks_ = graph.num_ranks();
  ranks->state_ =
      std::make_shared<const RankPlans::State>(std::move(graph), lower_context, options.rates);
  result.ranks = std::move(ranks);
  return result;
}

PlanningResult plan_model(const std::string& model_path, const strategy::Strategy& written,
                          const PlanningOptions& options) {
  PlanningResult result = plan_ranks(model_path, written, options);
  for (int rank = 0; rank < result.ranks->num_ranks(); ++rank) {
    result.plans.push_back(result.ranks->plan(rank));
  }
  return result;
}

}  // namespace piper::planner
