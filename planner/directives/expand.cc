#include "planner/directives/expand.h"

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

// zero: place every task on the devices, then replicate with the stage's sharding.
std::vector<strategy::Directive> expand_zero(const strategy::Directive& directive) {
  const auto& zero = std::get<strategy::ZeroDirective>(directive.spec);
  strategy::PlaceDirective place;
  place.devices = zero.devices;
  strategy::ReplicateDirective replicate;
  replicate.devices = zero.devices;
  if (zero.bucket_size) replicate.bucket_size = *zero.bucket_size;
  replicate.shard_optimizer = zero.stage >= 1;
  replicate.shard_grads = zero.stage >= 2;
  replicate.shard_params = zero.stage >= 3;
  return {primitive(directive, place), primitive(directive, replicate)};
}

}  // namespace

strategy::Strategy expand_generators(const strategy::Strategy& strategy) {
  strategy::Strategy expanded = strategy;
  expanded.directives.clear();
  for (const strategy::Directive& directive : strategy.directives) {
    if (std::holds_alternative<strategy::ZeroDirective>(directive.spec)) {
      for (auto& primitive : expand_zero(directive)) expanded.directives.push_back(primitive);
    } else {
      expanded.directives.push_back(directive);
    }
  }
  return expanded;
}

}  // namespace piper::planner
