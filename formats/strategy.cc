// Strategy files: loading, writing back (to_json), filter and glob matching.
// Parsing and validation live in strategy_parse.cc (directives, top level),
// strategy_mesh.cc (mesh, axis, device lists) and strategy_reader.cc (values).
#include "formats/strategy.h"

#include <fnmatch.h>

#include "formats/atomic_file.h"

namespace piper::strategy {
namespace {

using nlohmann::json;

template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

json optimizer_json(const Optimizer& opt) {
  json j = {{"type", opt.type}, {"lr", opt.lr}, {"weight_decay", opt.weight_decay}};
  if (opt.type == "sgd") {
    j["momentum"] = opt.momentum;
    j["dampening"] = opt.dampening;
    j["nesterov"] = opt.nesterov;
  } else {
    j["betas"] = {opt.beta1, opt.beta2};
    j["eps"] = opt.eps;
  }
  const formats::LrSchedule& schedule = opt.lr_schedule;
  j["lr_schedule"] = {{"type", schedule.type},
                      {"warmup_steps", schedule.warmup_steps},
                      {"min_lr_ratio", schedule.min_lr_ratio}};
  if (schedule.total_steps != 0) j["lr_schedule"]["total_steps"] = schedule.total_steps;
  if (opt.clip_grad_norm != 0) j["clip_grad_norm"] = opt.clip_grad_norm;
  return j;
}

}  // namespace

bool Directive::operator==(const Directive& other) const {
  return index == other.index && op == other.op && path == other.path && spec == other.spec;
}

Strategy load_strategy(const std::string& path) {
  return parse_strategy(formats::read_file(path), path);
}

json to_json(const Filter& filter) {
  json j = json::object();
  for (const auto& [name, value] : filter.tags) j[name] = value ? json(*value) : json("*");
  if (filter.pass) j["PASS"] = *filter.pass;
  return j;
}

json to_json(const DirectiveSpec& spec) {
  return std::visit(
      Overloaded{
          [](const SplitDirective& d) -> json {
            return {{"filter", to_json(d.filter)},
                    {"dim_name", d.dim_name},
                    {"num_microbatches", d.num_microbatches}};
          },
          [](const PlaceDirective& d) -> json {
            return {{"filter", to_json(d.filter)}, {"devices", d.devices}, {"stream", d.stream}};
          },
          [](const ReplicateDirective& d) -> json {
            return {{"filter", to_json(d.filter)},      {"devices", d.devices},
                    {"bucket_size", d.bucket_size},     {"shard_optimizer", d.shard_optimizer},
                    {"shard_grads", d.shard_grads},     {"shard_params", d.shard_params},
                    {"gather_stream", d.gather_stream}, {"reduce_stream", d.reduce_stream}};
          },
          [](const ShardDirective& d) -> json {
            json j = {{"filter", to_json(d.filter)},
                      {"devices", d.groups.size() == 1 ? json(d.groups.front()) : json(d.groups)},
                      {"stream", d.stream}};
            if (d.style.empty()) {
              j["params"] = d.params;
              j["sequence_parallel"] = d.sequence_parallel;
            } else {
              j["style"] = d.style;
            }
            if (d.tag) j["tag"] = *d.tag;
            return j;
          },
          [](const OrderDirective& d) -> json {
            json groups = json::array();
            for (const auto& group : d.filters) {
              json& out = groups.emplace_back(json::array());
              for (const Filter& filter : group) out.push_back(to_json(filter));
            }
            json j = {{"filters", groups}};
            if (d.device) j["device"] = *d.device;
            return j;
          },
          [](const RecomputeDirective& d) -> json {
            return {{"filter", to_json(d.filter)}};
          },
          [](const PipelineDirective& d) -> json {
            json j = {{"schedule", d.schedule},
                      {"tag", d.tag},
                      {"devices", d.devices},
                      {"num_microbatches", d.num_microbatches},
                      {"chunks", d.chunks}};
            if (d.auto_stages) j["stages"] = "auto";
            if (!d.replicas.empty()) j["replicas"] = d.replicas;
            j["zero"] = d.zero;
            if (d.bucket_size) j["bucket_size"] = *d.bucket_size;
            return j;
          },
          [](const ZeroDirective& d) -> json {
            json j = {{"stage", d.stage}, {"devices", d.devices}};
            if (d.bucket_size) j["bucket_size"] = *d.bucket_size;
            return j;
          },
      },
      spec);
}

json to_json(const Directive& directive) {
  json j = to_json(directive.spec);
  j["op"] = std::visit([](const auto& d) { return std::string(d.kOp); }, directive.spec);
  return j;
}

json to_json(const Strategy& strategy) {
  json annotations = json::array();
  for (const Annotation& a : strategy.annotations) {
    annotations.push_back({{"match", a.match}, {"tags", a.tags}});
  }
  json directives = json::array();
  for (const Directive& d : strategy.directives) directives.push_back(to_json(d));
  json j = {{"batch", {{"global", strategy.global_batch}}},
            {"optimizer", optimizer_json(strategy.optimizer)},
            {"precision", strategy.precision},
            {"frozen", strategy.frozen},
            {"annotations", annotations},
            {"directives", directives}};
  // An empty mesh is no mesh: "mesh": [] would not parse.
  if (!strategy.mesh.empty()) {
    json& mesh = j["mesh"] = json::array();
    for (const MeshAxis& axis : strategy.mesh) mesh.push_back(json::array({axis.name, axis.size}));
  }
  return j;
}

bool matches(const Filter& filter, const std::map<std::string, int64_t>& tags, int64_t microbatch,
             const std::string& pass) {
  if (filter.pass && *filter.pass != pass) return false;
  for (const auto& [name, wanted] : filter.tags) {
    if (!wanted) continue;  // "*": any value, or none
    if (name == "MB") {
      if (microbatch != *wanted) return false;  // kNoMicrobatch never equals an index
      continue;
    }
    auto it = tags.find(name);
    if (it == tags.end() || it->second != *wanted) return false;
  }
  return true;
}

bool glob_match(const std::string& pattern, const std::string& text) {
  return ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

}  // namespace piper::strategy
