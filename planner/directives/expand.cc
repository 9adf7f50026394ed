#include "planner/directives/expand.h"

#include "formats/error.h"
#include "planner/schedule/pipeline_schedule.h"

namespace piper::planner {
namespace {

strategy::Directive primitive(const strategy::Directive& from, strategy::DirectiveSpec spec) {
  strategy::Directive directive;
  directive.index = from.index;
  directive.path = from.path;
  directive.spec = std::move(spec);
  directive.op = std::visit([](const auto& s) { return std::string(s.kOp); }, directive.spec);
  directive.json = strategy::to_json(directive);
  return directive;
}

// Data parallelism at a ZeRO stage: 0 bucketed all-reduce, 1 sharded optimizer state, 2 also
// sharded gradients, 3 also sharded parameters.
strategy::ReplicateDirective zero_replicate(int64_t stage, std::optional<int64_t> bucket_size,
                                            std::vector<int64_t> devices) {
  strategy::ReplicateDirective replicate;
  replicate.devices = std::move(devices);
  if (bucket_size) replicate.bucket_size = *bucket_size;
  replicate.shard_optimizer = stage >= 1;
  replicate.shard_grads = stage >= 2;
  replicate.shard_params = stage >= 3;
  return replicate;
}

// zero: place every task on the devices, then replicate with the stage's sharding.
std::vector<strategy::Directive> expand_zero(const strategy::Directive& directive) {
  const auto& zero = std::get<strategy::ZeroDirective>(directive.spec);
  strategy::PlaceDirective place;
  place.devices = zero.devices;
  return {primitive(directive, place),
          primitive(directive, zero_replicate(zero.stage, zero.bucket_size, zero.devices))};
}

strategy::Filter slot_filter(const std::string& tag, const schedule::Slot& slot) {
  strategy::Filter filter;
  filter.tags[tag] = slot.stage;
  filter.tags["MB"] = slot.microbatch;
  filter.pass = ir::to_string(slot.pass);
  return filter;
}

// One `order` per device: its slots one group each, except that a slot `with_previous`
// joins the group before it (tasks of one group may overlap).
void add_orders(const strategy::Directive& directive, const schedule::PipelineOrder& order,
                std::vector<strategy::Directive>& result) {
  const auto& pipeline = std::get<strategy::PipelineDirective>(directive.spec);
  for (size_t device = 0; device < order.size(); ++device) {
    strategy::OrderDirective device_order;
    device_order.device = pipeline.devices[device];
    for (const schedule::Slot& slot : order[device]) {
      const strategy::Filter filter = slot_filter(pipeline.tag, slot);
      if (slot.with_previous && !device_order.filters.empty()) {
        device_order.filters.back().push_back(filter);
      } else {
        device_order.filters.push_back({filter});
      }
    }
    result.push_back(primitive(directive, device_order));
  }
}

strategy::Directive split_into(const strategy::Directive& directive, int64_t microbatches) {
  strategy::SplitDirective split;
  split.dim_name = "MB";
  split.num_microbatches = microbatches;
  return primitive(directive, split);
}

// DualPipe's overlapped pairs run a forward of one of a device's two stages beside a backward
// of the other, so the two stages compute on streams of their own: even stages on "compute",
// odd ones on "compute2" (a device's two stages differ in parity in both schedules).
bool overlaps_pairs(const strategy::PipelineDirective& pipeline) {
  return pipeline.schedule == "dualpipe" || pipeline.schedule == "dualpipev";
}

strategy::Directive place_stage(const strategy::Directive& directive, int64_t stage,
                                int64_t device) {
  const auto& pipeline = std::get<strategy::PipelineDirective>(directive.spec);
  strategy::PlaceDirective place;
  place.filter.tags[pipeline.tag] = stage;
  place.devices = {device};
  if (overlaps_pairs(pipeline) && stage % 2 == 1) place.stream = "compute2";
  return primitive(directive, place);
}

// dualpipe: stage s of the microbatches that enter at the first device runs on device s,
// of those that enter at the last on device p-1-s, so each stage is replicated over its
// two mirror devices (and their data-parallel replicas), which sum its gradients at the
// pipeline's ZeRO stage. The replicas split each of the m/2
// microbatches' rows, so replica 0's microbatch k and replica 1's are DualPipe's k-th
// microbatch of either direction, each a 1/m of the batch.
std::vector<strategy::Directive> expand_dualpipe(const strategy::Directive& directive,
                                                 const schedule::PipelineOrder& order) {
  const auto& pipeline = std::get<strategy::PipelineDirective>(directive.spec);
  const int64_t p = static_cast<int64_t>(pipeline.devices.size());
  std::vector<strategy::Directive> result{split_into(directive, pipeline.num_microbatches / 2)};
  for (int64_t stage = 0; stage < p; ++stage) {
    result.push_back(place_stage(directive, stage, pipeline.devices[stage]));
  }
  // Device d's j-th data-parallel replica (d itself without replicas).
  const auto replica = [&](int64_t device, size_t j) {
    return pipeline.replicas.empty() ? pipeline.devices[device] : pipeline.replicas[device][j];
  };
  const size_t copies = pipeline.replicas.empty() ? 1 : pipeline.replicas.front().size();
  for (int64_t stage = 0; stage < p; ++stage) {
    // Replica 2j of every stage is direction 0 of pipeline copy j, replica 2j+1 direction 1.
    std::vector<int64_t> devices;
    for (size_t j = 0; j < copies; ++j) {
      devices.push_back(replica(stage, j));
      devices.push_back(replica(p - 1 - stage, j));
    }
    strategy::ReplicateDirective replicate =
        zero_replicate(pipeline.zero, pipeline.bucket_size, std::move(devices));
    replicate.filter.tags[pipeline.tag] = stage;
    result.push_back(primitive(directive, replicate));
  }
  add_orders(directive, order, result);
  return result;
}

// pipeline: split into microbatches, place stage s (the tag's value s) on
// device s mod p (Megatron's interleaved layout), give every device the
// order of its slots that the schedule generates, and replicate each stage
// over its device's replicas: what one writes by hand for DP x PP, so both
// plan alike.
// With "stages": "auto" the tag's values come from annotations that
// planner/auto_stages.h adds.
std::vector<strategy::Directive> expand_pipeline(const strategy::Directive& directive,
                                                 const std::string& source) {
  const auto& pipeline = std::get<strategy::PipelineDirective>(directive.spec);
  const schedule::PipelineShape shape{static_cast<int64_t>(pipeline.devices.size()),
                                      pipeline.num_microbatches, pipeline.chunks};
  const schedule::PipelineOrder order =
      schedule::pipeline_order(pipeline.schedule, shape, source + ": " + directive.path);
  if (pipeline.schedule == "dualpipe") return expand_dualpipe(directive, order);
  std::vector<strategy::Directive> result{split_into(directive, pipeline.num_microbatches)};
  const int64_t stages =
      pipeline.schedule == "dualpipev" ? 2 * shape.devices : shape.devices * shape.chunks;
  // The pipeline device of each stage: dualpipev's V puts stages s and 2p-1-s on device s.
  const auto device_of = [&](int64_t stage) {
    if (pipeline.schedule != "dualpipev") return stage % shape.devices;
    return stage < shape.devices ? stage : 2 * shape.devices - 1 - stage;
  };
  for (int64_t stage = 0; stage < stages; ++stage) {
    result.push_back(place_stage(directive, stage, pipeline.devices[device_of(stage)]));
  }
  add_orders(directive, order, result);
  if (pipeline.replicas.empty()) return result;
  for (int64_t stage = 0; stage < stages; ++stage) {
    strategy::ReplicateDirective replicate =
        zero_replicate(pipeline.zero, pipeline.bucket_size, pipeline.replicas[device_of(stage)]);
    replicate.filter.tags[pipeline.tag] = stage;
    result.push_back(primitive(directive, replicate));
  }
  return result;
}

}  // namespace

strategy::Strategy expand_generators(const strategy::Strategy& strategy) {
  strategy::Strategy expanded = strategy;
  expanded.directives.clear();
  for (const strategy::Directive& directive : strategy.directives) {
    if (std::holds_alternative<strategy::ZeroDirective>(directive.spec)) {
      for (auto& primitive : expand_zero(directive)) expanded.directives.push_back(primitive);
    } else if (std::holds_alternative<strategy::PipelineDirective>(directive.spec)) {
      for (auto& primitive : expand_pipeline(directive, strategy.source)) {
        expanded.directives.push_back(primitive);
      }
    } else {
      expanded.directives.push_back(directive);
    }
  }
  return expanded;
}

}  // namespace piper::planner
