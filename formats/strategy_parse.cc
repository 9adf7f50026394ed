// Parsing and validation of strategy files: each directive is a row of rules() (its keys)
// and a short reader function over an Object (strategy_reader.h); the mesh and device
// lists are read in strategy_mesh.cc.
#include <algorithm>
#include <map>
#include <type_traits>

#include "formats/error.h"
#include "formats/strategy.h"
#include "formats/strategy_reader.h"

namespace piper::strategy {
namespace {

using reader::check_in_mesh;
using reader::check_tag_name;
using reader::child_path;
using reader::Context;
using reader::device_groups;
using reader::device_list;
using reader::index_path;
using reader::is_identifier;
using reader::joined;
using reader::json;
using reader::Keys;
using reader::Object;
using reader::pipeline_replicas;
using reader::Range;
using reader::read_array;
using reader::read_choice;
using reader::read_filter;
using reader::read_int;
using reader::read_mesh;
using reader::read_number;
using reader::read_object;
using reader::read_string;
using reader::resolve_pipeline_replicas;
using reader::shown;

constexpr int64_t kMaxMicrobatches = 65536;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 31;

// Initializer glob -> the dimension shard splits; whether the dimension exists is the
// planner's check against the tensor.
std::map<std::string, int64_t> read_params(const Context& ctx, const std::string& path,
                                           const json& v) {
  if (!v.is_object() || v.empty()) {
    ctx.expected(path,
                 "a non-empty object of initializer glob: dimension to split, e.g. "
                 "{\"blocks.*.attn.q.weight\": 0}",
                 v);
  }
  std::map<std::string, int64_t> params;
  for (const auto& [glob, dim] : v.items()) {
    const std::string at = child_path(path, glob);
    if (glob.empty()) ctx.fail(at, "an empty glob matches no initializer");
    params[glob] = read_int(ctx, at, dim, 0);
  }
  return params;
}

// ---- Directives: keys (required ones listed in `required`) and a reader.

SplitDirective read_split(const Object& o) {
  return {.filter = o.filter("filter"),
          .dim_name = o.string("dim_name", ""),
          .num_microbatches = *o.integer("num_microbatches", 1, kMaxMicrobatches)};
}

PlaceDirective read_place(const Object& o) {
  return {.filter = o.filter("filter"),
          .devices = device_list(o),
          .stream = o.string("stream", "compute")};
}

ReplicateDirective read_replicate(const Object& o) {
  std::optional<bool> optimizer = o.boolean("shard_optimizer");
  std::optional<bool> grads = o.boolean("shard_grads");
  std::optional<bool> params = o.boolean("shard_params");
  if (params == true && grads == false) {
    o.fail("shard_grads",
           "false contradicts shard_params true (sharded parameters imply sharded "
           "gradients); drop shard_grads or set it true");
  }
  if ((params == true || grads == true) && optimizer == false) {
    o.fail("shard_optimizer", std::string("false contradicts ") +
                                  (grads == true ? "shard_grads" : "shard_params") +
                                  " true (sharded gradients or parameters imply sharded "
                                  "optimizer state); drop shard_optimizer or set it true");
  }
  ReplicateDirective d{.filter = o.filter("filter"), .devices = device_list(o)};
  d.bucket_size = o.integer("bucket_size", 1).value_or(kDefaultBucketSize);
  d.shard_params = params.value_or(false);
  d.shard_grads = grads.value_or(false) || d.shard_params;
  d.shard_optimizer = optimizer.value_or(false) || d.shard_grads;
  d.gather_stream = o.string("gather_stream", "dp_gather");
  d.reduce_stream = o.string("reduce_stream", "dp_reduce");
  return d;
}

// "column" and "row" named a Megatron split without saying which parameters; "params" says
// it per parameter.
std::optional<std::string> read_shard_style(const Object& o) {
  const json* style = o.find("style");
  if (style && (*style == "column" || *style == "row")) {
    o.fail("style", "\"" + style->get<std::string>() +
                        "\" is not a shard style; name the parameters to split in \"params\" "
                        "instead, {\"<initializer glob>\": dim}: dim 0 for a column split of "
                        "PyTorch's [out, in] weight, 1 for a row split");
  }
  return o.choice("style", {"expert"});
}

ShardDirective read_shard(const Object& o) {
  ShardDirective d;
  d.filter = o.filter("filter");
  d.groups = device_groups(o);
  const std::optional<std::string> style = read_shard_style(o);
  const std::optional<std::map<std::string, int64_t>> params = o.get("params", read_params);
  if (params && style) {
    o.fail("style",
           "given with \"params\"; a shard directive splits either the parameters "
           "\"params\" names or the experts of style \"expert\", not both");
  }
  if (!params && !style) {
    o.ctx().fail(o.path(),
                 "missing required key \"params\" (initializer glob: dimension to split) or "
                 "\"style\": \"expert\"");
  }
  d.params = params.value_or(std::map<std::string, int64_t>{});
  d.style = style.value_or("");
  d.tag = o.tag_name("tag");
  if (style && !d.tag) {
    o.ctx().fail(o.path(),
                 "missing required key \"tag\" (style \"expert\" needs the tag that "
                 "names experts)");
  }
  if (!style && d.tag) o.fail("tag", "only valid with style \"expert\", not with \"params\"");
  if (std::optional<bool> sequence_parallel = o.boolean("sequence_parallel")) {
    if (!params) {
      o.fail("sequence_parallel", "only valid with \"params\", not with style \"expert\"");
    }
    d.sequence_parallel = *sequence_parallel;
  }
  d.stream = o.string("stream", "compute");
  return d;
}

OrderDirective read_order(const Object& o) {
  OrderDirective d;
  const std::string groups_path = o.at("filters");
  const json& groups = *o.find("filters");
  const std::string what = "groups: a non-empty array of non-empty arrays of filters";
  if (!groups.is_array() || groups.empty()) o.ctx().expected(groups_path, what, groups);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string group_path = index_path(groups_path, g);
    if (!groups[g].is_array() || groups[g].empty()) {
      o.ctx().expected(group_path, "a non-empty array of filters", groups[g]);
    }
    std::vector<Filter>& group = d.filters.emplace_back();
    for (size_t f = 0; f < groups[g].size(); ++f) {
      group.push_back(read_filter(o.ctx(), index_path(group_path, f), groups[g][f]));
    }
  }
  d.device = o.integer("device", 0);
  if (d.device) check_in_mesh(o.ctx(), o.at("device"), *d.device);
  return d;
}

RecomputeDirective read_recompute(const Object& o) { return {.filter = o.filter("filter")}; }

PipelineDirective read_pipeline(const Object& o) {
  PipelineDirective d{.schedule = *o.choice("schedule", {"gpipe", "1f1b", "interleaved", "zb-h1",
                                                         "dualpipe", "dualpipev"}),
                      .tag = o.tag_name("tag").value_or("PP"),
                      .devices = device_list(o),
                      .num_microbatches = *o.integer("num_microbatches", 1, kMaxMicrobatches),
                      .chunks = o.integer("chunks", 1).value_or(1),
                      .auto_stages = o.choice("stages", {"auto"}).has_value(),
                      .replicas = {},
                      .zero = o.integer("zero", 0, 3).value_or(0),
                      .bucket_size = o.integer("bucket_size", 1)};
  if (d.chunks > 1 && d.schedule != "interleaved") {
    o.fail("chunks", "more than one chunk per device needs schedule \"interleaved\", not \"" +
                         d.schedule + "\"");
  }
  d.replicas = pipeline_replicas(o, d.devices);
  return d;
}

ZeroDirective read_zero(const Object& o) {
  return {.stage = *o.integer("stage", 0, 3),
          .devices = device_list(o),
          .bucket_size = o.integer("bucket_size", 1)};
}

struct DirectiveRule {
  std::string_view op;
  Keys keys;  // "op" first
  Keys required;
  DirectiveSpec (*read)(const Object&);
};

template <typename Spec, Spec (*Read)(const Object&)>
DirectiveSpec read_as(const Object& o) {
  return Read(o);
}

const std::vector<DirectiveRule>& rules() {
  static const std::vector<DirectiveRule> kRules = {
      {"split",
       {"op", "filter", "dim_name", "num_microbatches"},
       {"dim_name", "num_microbatches"},
       read_as<SplitDirective, read_split>},
      {"place",
       {"op", "filter", "devices", "axis", "stream"},
       {},
       read_as<PlaceDirective, read_place>},
      {"replicate",
       {"op", "filter", "devices", "axis", "bucket_size", "shard_optimizer", "shard_grads",
        "shard_params", "gather_stream", "reduce_stream"},
       {},
       read_as<ReplicateDirective, read_replicate>},
      {"shard",
       {"op", "filter", "devices", "axis", "params", "sequence_parallel", "style", "tag", "stream"},
       {},
       read_as<ShardDirective, read_shard>},
      {"order", {"op", "filters", "device"}, {"filters"}, read_as<OrderDirective, read_order>},
      {"recompute", {"op", "filter"}, {}, read_as<RecomputeDirective, read_recompute>},
      {"pipeline",
       {"op", "schedule", "tag", "devices", "axis", "num_microbatches", "chunks", "stages",
        "replica_axes", "replicas", "zero", "bucket_size"},
       {"schedule", "num_microbatches"},
       read_as<PipelineDirective, read_pipeline>},
      {"zero",
       {"op", "stage", "devices", "axis", "bucket_size"},
       {"stage"},
       read_as<ZeroDirective, read_zero>},
  };
  return kRules;
}

Keys op_names() {
  Keys ops;
  for (const DirectiveRule& rule : rules()) ops.push_back(rule.op);
  return ops;
}

Directive read_directive(const Context& ctx, const json& v, size_t index) {
  const std::string path = index_path("$.directives", index);
  read_object(ctx, path, v);
  auto op = v.find("op");
  if (op == v.end()) {
    ctx.fail(path, "missing required key \"op\"; expected one of " + joined(op_names(), false));
  }
  const std::string op_path = path + ".op";
  if (!op->is_string()) ctx.expected(op_path, "a directive name (string)", *op);
  const std::string& name = op->get_ref<const std::string&>();
  auto rule = std::find_if(rules().begin(), rules().end(),
                           [&](const DirectiveRule& r) { return r.op == name; });
  if (rule == rules().end()) {
    ctx.fail(op_path,
             "unknown directive " + shown(*op) + "; expected one of " + joined(op_names(), false));
  }
  Object object(ctx, v, path, rule->keys, rule->required);
  return Directive{.index = index, .op = name, .path = path, .spec = rule->read(object), .json = v};
}

// ---- The top level.

const Keys kSgdOnly = {"momentum", "dampening", "nesterov"};
const Keys kAdamwOnly = {"betas", "eps"};

// $.optimizer.lr_schedule: the rules are formats::lr_schedule_problem's, named by JSON path.
formats::LrSchedule read_lr_schedule(const Context& ctx, const std::string& path, const json& v) {
  Object o(ctx, v, path, {"type", "warmup_steps", "total_steps", "min_lr_ratio"}, {"type"});
  formats::LrSchedule schedule;
  schedule.type = *o.choice("type", formats::lr_schedule_types());
  schedule.warmup_steps = o.integer("warmup_steps", 0).value_or(0);
  schedule.total_steps = o.integer("total_steps", 1).value_or(0);
  schedule.min_lr_ratio =
      o.number("min_lr_ratio", Range{.min = 0, .max = 1, .max_open = false}).value_or(0.0);
  if (const auto problem = formats::lr_schedule_problem(schedule)) {
    o.fail(problem->field, problem->what);
  }
  return schedule;
}

Optimizer read_optimizer(const Context& ctx, const json& v) {
  const std::string path = "$.optimizer";
  read_object(ctx, path, v);
  if (!v.contains("type")) ctx.fail(path, "missing required key \"type\"");
  Optimizer opt;
  opt.type = read_choice(ctx, path + ".type", v["type"], {"sgd", "adamw"});
  const bool sgd = opt.type == "sgd";
  const Keys& others = sgd ? kAdamwOnly : kSgdOnly;
  for (const auto& item : v.items()) {
    if (std::find(others.begin(), others.end(), item.key()) != others.end()) {
      ctx.fail(child_path(path, item.key()), "only valid for type \"" +
                                                 std::string(sgd ? "adamw" : "sgd") + "\", not \"" +
                                                 opt.type + "\"");
    }
  }
  Object o(
      ctx, v, path,
      sgd ? Keys{"type", "lr", "momentum", "dampening", "nesterov", "weight_decay", "lr_schedule",
                 "clip_grad_norm"}
          : Keys{"type", "lr", "betas", "eps", "weight_decay", "lr_schedule", "clip_grad_norm"});
  const Range positive{.min = 0, .min_open = true};
  const Range non_negative{.min = 0};
  opt.lr = o.number("lr", positive).value_or(sgd ? 0.01 : 0.001);
  opt.weight_decay = o.number("weight_decay", non_negative).value_or(sgd ? 0.0 : 0.01);
  if (const json* schedule = o.find("lr_schedule")) {
    opt.lr_schedule = read_lr_schedule(ctx, o.at("lr_schedule"), *schedule);
  }
  opt.clip_grad_norm = o.number("clip_grad_norm", positive).value_or(0.0);
  if (sgd) {
    opt.momentum = o.number("momentum", non_negative).value_or(0.0);
    opt.dampening = o.number("dampening", non_negative).value_or(0.0);
    opt.nesterov = o.boolean("nesterov").value_or(false);
    if (opt.nesterov && (opt.momentum <= 0 || opt.dampening != 0)) {
      o.fail("nesterov", "true needs momentum > 0 and dampening 0 (as in PyTorch); got momentum " +
                             shown(opt.momentum) + ", dampening " + shown(opt.dampening));
    }
    return opt;
  }
  opt.eps = o.number("eps", positive).value_or(1e-8);
  if (const json* betas = o.find("betas")) {
    if (!betas->is_array() || betas->size() != 2) {
      o.ctx().expected(o.at("betas"), "[beta1, beta2], each a number in [0, 1)", *betas);
    }
    const Range unit{.min = 0, .max = 1, .max_open = true};
    opt.beta1 = read_number(ctx, o.at("betas") + "[0]", (*betas)[0], unit);
    opt.beta2 = read_number(ctx, o.at("betas") + "[1]", (*betas)[1], unit);
  }
  return opt;
}

Annotation read_annotation(const Context& ctx, const json& v, size_t index) {
  Object o(ctx, v, index_path("$.annotations", index), {"match", "tags"}, {"match", "tags"});
  Annotation annotation{.match = o.string("match", ""), .tags = {}};
  const json& tags = *o.find("tags");
  if (!tags.is_object() || tags.empty()) {
    ctx.expected(o.at("tags"), "a non-empty object of tag name: index", tags);
  }
  for (const auto& [name, value] : tags.items()) {
    const std::string at = child_path(o.at("tags"), name);
    check_tag_name(ctx, at, name);
    annotation.tags[name] = read_int(ctx, at, value, 0);
  }
  return annotation;
}

// Every filter of a directive.
std::vector<Filter*> filters_of(DirectiveSpec& spec) {
  return std::visit(
      [](auto& d) -> std::vector<Filter*> {
        if constexpr (requires { d.filter; }) {
          return {&d.filter};
        } else if constexpr (std::is_same_v<std::decay_t<decltype(d)>, OrderDirective>) {
          std::vector<Filter*> filters;
          for (auto& group : d.filters) {
            for (Filter& filter : group) filters.push_back(&filter);
          }
          return filters;
        } else {
          return {};
        }
      },
      spec);
}

// A split's dim_name names the microbatch index in filters: {"<dim_name>": 2} selects
// microbatch 2, as "MB" (the name the generators emit, and always accepted) does. Filters
// are rewritten to "MB", the one key Filter matching knows.
void name_microbatches(const Context& ctx, Strategy& s) {
  for (const Directive& directive : s.directives) {
    const auto* split = std::get_if<SplitDirective>(&directive.spec);
    if (!split || split->dim_name == "MB") continue;
    const std::string at = directive.path + ".dim_name";
    if (split->dim_name == "PASS" || !is_identifier(split->dim_name)) {
      ctx.fail(at, "\"" + split->dim_name +
                       "\" cannot name the microbatch index in filters; expected letters, digits "
                       "and _, not starting with a digit, other than \"PASS\" (\"MB\" is usual)");
    }
    for (size_t i = 0; i < s.annotations.size(); ++i) {
      if (s.annotations[i].tags.count(split->dim_name)) {
        ctx.fail(at, "\"" + split->dim_name + "\" names the microbatch index, but $.annotations[" +
                         std::to_string(i) + "] uses it as a tag; choose another name");
      }
    }
    for (Directive& other : s.directives) {
      for (Filter* filter : filters_of(other.spec)) {
        const auto named = filter->tags.find(split->dim_name);
        if (named == filter->tags.end()) continue;
        if (filter->tags.count("MB") && filter->tags.at("MB") != named->second) {
          ctx.fail(other.path, "a filter selects microbatches by both \"MB\" and \"" +
                                   split->dim_name + "\" (the split's dim_name) differently");
        }
        filter->tags["MB"] = named->second;
        filter->tags.erase(split->dim_name);
      }
    }
  }
}

}  // namespace

Strategy parse_strategy(const std::string& text, const std::string& source_name) {
  Context ctx(source_name);
  const json root = parse_json_text(text, source_name);
  // "$schema" lets editors validate the file against schemas/strategy.schema.json; planning
  // reads nothing from it.
  Object top(
      ctx, root, "$",
      {"$schema", "batch", "optimizer", "precision", "frozen", "annotations", "mesh", "directives"},
      {"batch"});
  top.string("$schema", "");
  Strategy s;
  s.source = source_name;
  Object batch(ctx, *top.find("batch"), top.at("batch"), {"global"}, {"global"});
  s.global_batch = *batch.integer("global", 1, kMaxGlobalBatch);
  if (const json* optimizer = top.find("optimizer")) s.optimizer = read_optimizer(ctx, *optimizer);
  s.precision = top.choice("precision", {"fp32", "tf32", "bf16"}).value_or("fp32");
  if (const json* frozen = top.find("frozen")) {
    read_array(ctx, top.at("frozen"), *frozen, "glob patterns");
    for (size_t i = 0; i < frozen->size(); ++i) {
      s.frozen.push_back(read_string(ctx, index_path(top.at("frozen"), i), (*frozen)[i]));
    }
  }
  if (const json* annotations = top.find("annotations")) {
    read_array(ctx, top.at("annotations"), *annotations, "{\"match\": ..., \"tags\": ...}");
    for (size_t i = 0; i < annotations->size(); ++i) {
      s.annotations.push_back(read_annotation(ctx, (*annotations)[i], i));
    }
  }
  if (const json* mesh = top.find("mesh")) {
    s.mesh = read_mesh(ctx, top.at("mesh"), *mesh);
    ctx.set_mesh(s.mesh);
  }
  if (const json* directives = top.find("directives")) {
    read_array(ctx, top.at("directives"), *directives, "directives {\"op\": ...}");
    for (size_t i = 0; i < directives->size(); ++i) {
      s.directives.push_back(read_directive(ctx, (*directives)[i], i));
    }
  }
  name_microbatches(ctx, s);
  resolve_pipeline_replicas(ctx, s);
  return s;
}

const std::vector<std::string>& directive_ops() {
  static const std::vector<std::string> kOps = [] {
    std::vector<std::string> ops;
    for (const DirectiveRule& rule : rules()) ops.emplace_back(rule.op);
    return ops;
  }();
  return kOps;
}

const std::vector<std::string>& directive_keys(std::string_view op) {
  static const std::map<std::string, std::vector<std::string>, std::less<>> kKeys = [] {
    std::map<std::string, std::vector<std::string>, std::less<>> keys;
    for (const DirectiveRule& rule : rules()) {
      keys[std::string(rule.op)].assign(rule.keys.begin(), rule.keys.end());
    }
    return keys;
  }();
  auto it = kKeys.find(op);
  if (it == kKeys.end()) throw Error("unknown directive \"" + std::string(op) + "\"");
  return it->second;
}

}  // namespace piper::strategy
