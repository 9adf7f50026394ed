#include "planner/directives/directive.h"

#include "formats/error.h"

namespace piper::planner {

std::string DirectiveContext::where(const std::string& field) const {
  return source + ": " + directive.path + (field.empty() ? "" : "." + field) + " (" + directive.op +
         ")";
}

DirectivePass directive_pass(const DirectiveContext& context) {
  if (context.directive.op == "place") return apply_place;
  if (context.directive.op == "split") return apply_split;
  if (context.directive.op == "replicate") return apply_replicate;
  if (context.directive.op == "recompute") return apply_recompute;
  if (context.directive.op == "order") return apply_order;
  if (context.directive.op == "shard") return apply_shard;
  throw Error(context.where() + ": directive '" + context.directive.op +
              "' is not implemented yet; this version implements: split, place, replicate, "
              "shard, order, recompute, and the generators zero and pipeline");
}

bool selects(const strategy::Filter& filter, const ir::Task& task) {
  return strategy::matches(filter, task.tags, task.microbatch, ir::to_string(task.pass));
}

}  // namespace piper::planner
