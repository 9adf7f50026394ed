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
  std::vector<strategy::Directive> result;
  strategy::SplitDirective split;
  split.dim_name = "MB";
  split.num_microbatches = pipeline.num_microbatches;
  result.push_back(primitive(directive, split));
  for (int64_t stage = 0; stage < shape.devices * shape.chunks; ++stage) {
    strategy::PlaceDirective place;
    place.filter.tags[pipeline.tag] = stage;
    place.devices = {pipeline.devices[stage % shape.devices]};
    result.push_back(primitive(directive, place));
  }
  for (size_t device = 0; device < order.size(); ++device) {
    strategy::OrderDirective device_order;
    device_order.device = pipeline.devices[device];
    for (const schedule::Slot& slot : order[device]) {
      device_order.filters.push_back({slot_filter(pipeline.tag, slot)});
    }
    result.push_back(primitive(directive, device_order));
  }
  if (pipeline.replicas.empty()) return result;
  for (int64_t stage = 0; stage < shape.devices * shape.chunks; ++stage) {
    strategy::ReplicateDirective replicate = zero_replicate(
        pipeline.zero, pipeline.bucket_size, pipeline.replicas[stage % shape.devices]);
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
