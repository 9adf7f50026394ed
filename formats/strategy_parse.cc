// Parsing and validation of strategy files. One Object helper checks a key set
// and hands out typed values that name their JSON path when they are wrong;
// each directive is a row of rules() (its keys) and a short reader function.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>

#include "formats/error.h"
#include "formats/strategy.h"

namespace piper::strategy {
namespace {

using nlohmann::json;
using Keys = std::vector<std::string_view>;

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
// Bounds generous enough for thousands of ranks, so that a damaged or hostile file fails at
// once instead of running the planner out of time or memory.
constexpr size_t kMaxListEntries = 100000;  // directives, annotations, frozen globs
constexpr int64_t kMaxDevices = 65536;      // device indices are below this
constexpr int64_t kMaxMicrobatches = 65536;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 31;

bool is_identifier(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string child_path(const std::string& path, std::string_view key) {
  if (is_identifier(key)) return path + "." + std::string(key);
  return path + "[" + json(std::string(key)).dump() + "]";
}

std::string index_path(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// The offending value as written, shortened so one message stays one line.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string joined(const Keys& words, bool quote) {
  std::string out;
  for (std::string_view word : words) {
    if (!out.empty()) out += ", ";
    out += quote ? "\"" + std::string(word) + "\"" : std::string(word);
  }
  return out;
}

class Context {
 public:
  explicit Context(std::string source) : source_(std::move(source)) {}
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw Error(source_ + ": " + path + ": " + what);
  }
  [[noreturn]] void expected(const std::string& path, const std::string& what,
                             const json& got) const {
    fail(path, "expected " + what + ", got " + shown(got));
  }

 private:
  std::string source_;
};

// ---- Values: each reader checks one JSON value and names `path` if wrong.

const json& read_object(const Context& ctx, const std::string& path, const json& v) {
  if (!v.is_object()) ctx.expected(path, "an object", v);
  return v;
}

const json& read_array(const Context& ctx, const std::string& path, const json& v,
                       const std::string& of) {
  if (!v.is_array()) ctx.expected(path, "an array of " + of, v);
  if (v.size() > kMaxListEntries) {
    ctx.fail(path, "holds " + std::to_string(v.size()) + " entries; Piper takes at most " +
                       std::to_string(kMaxListEntries));
  }
  return v;
}

std::optional<int64_t> as_int64(const json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(kMaxInt)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_float()) {  // 32.0 is an integer, as in JSON Schema
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= -9.2e18 && d <= 9.2e18) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

int64_t read_int(const Context& ctx, const std::string& path, const json& v, int64_t min,
                 int64_t max = kMaxInt) {
  std::optional<int64_t> n = as_int64(v);
  if (!n || *n < min || *n > max) {
    std::string what;
    if (max != kMaxInt) {
      what = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    } else if (min == 1) {
      what = "a positive integer";
    } else {
      what = "an integer >= " + std::to_string(min);
    }
    ctx.expected(path, what, v);
  }
  return *n;
}

// [min, max) or (min, ...) and so on: the closed/open ends of a number range.
struct Range {
  double min = 0;
  bool min_open = false;
  double max = std::numeric_limits<double>::infinity();
  bool max_open = true;

  bool contains(double x) const {
    return (min_open ? x > min : x >= min) && (max_open ? x < max : x <= max);
  }
  std::string describe() const {
    auto number = [](double x) {
      std::ostringstream out;
      out << x;
      return out.str();
    };
    if (std::isinf(max)) return std::string("a number ") + (min_open ? "> " : ">= ") + number(min);
    return "a number in " + std::string(min_open ? "(" : "[") + number(min) + ", " + number(max) +
           (max_open ? ")" : "]");
  }
};

double read_number(const Context& ctx, const std::string& path, const json& v, Range range) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !range.contains(v.get<double>())) {
    ctx.expected(path, range.describe(), v);
  }
  return v.get<double>();
}

bool read_bool(const Context& ctx, const std::string& path, const json& v) {
  if (!v.is_boolean()) ctx.expected(path, "true or false", v);
  return v.get<bool>();
}

std::string read_string(const Context& ctx, const std::string& path, const json& v) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
    ctx.expected(path, "a non-empty string", v);
  }
  return v.get<std::string>();
}

std::string read_choice(const Context& ctx, const std::string& path, const json& v,
                        const Keys& options) {
  if (!v.is_string() ||
      std::find(options.begin(), options.end(), v.get_ref<const std::string&>()) == options.end()) {
    ctx.expected(path, "one of " + joined(options, true), v);
  }
  return v.get<std::string>();
}

// A user tag name: an identifier other than the reserved "MB" and "PASS".
void check_tag_name(const Context& ctx, const std::string& path, const std::string& name) {
  if (name == "MB" || name == "PASS") {
    ctx.fail(path,
             "the tag name \"" + name + "\" is reserved (" +
                 (name == "MB" ? "the microbatch index split gives" : "the pass: F, B, BI, BW, U") +
                 "); choose another name");
  }
  if (!is_identifier(name)) {
    ctx.fail(path, "\"" + name + "\" is not a tag name; expected letters, digits and _, " +
                       "not starting with a digit");
  }
}

std::string read_tag_name(const Context& ctx, const std::string& path, const json& v) {
  if (!v.is_string()) ctx.expected(path, "a tag name (string)", v);
  check_tag_name(ctx, path, v.get<std::string>());
  return v.get<std::string>();
}

std::vector<int64_t> read_devices(const Context& ctx, const std::string& path, const json& v) {
  std::vector<int64_t> devices;
  bool ok = v.is_array() && !v.empty();
  for (size_t i = 0; ok && i < v.size(); ++i) {
    std::optional<int64_t> device = as_int64(v[i]);
    ok = device && *device >= 0 && *device < kMaxDevices &&
         std::find(devices.begin(), devices.end(), *device) == devices.end();
    if (ok) devices.push_back(*device);
  }
  if (!ok) {
    ctx.expected(
        path,
        "a non-empty array of distinct device indices in [0, " + std::to_string(kMaxDevices) + ")",
        v);
  }
  return devices;
}

Filter read_filter(const Context& ctx, const std::string& path, const json& v) {
  if (!v.is_object()) {
    ctx.expected(path, "a filter (an object of tag: index or \"*\", \"PASS\": pass)", v);
  }
  Filter filter;
  for (const auto& [name, value] : v.items()) {
    std::string at = child_path(path, name);
    if (name == "PASS") {
      std::string pass = read_choice(ctx, at, value, {"F", "B", "BI", "BW", "U", "*"});
      if (pass != "*") filter.pass = pass;
      continue;
    }
    if (name != "MB") check_tag_name(ctx, at, name);
    if (value == "*") {
      filter.tags[name] = std::nullopt;
    } else {
      std::optional<int64_t> index = as_int64(value);
      if (!index || *index < 0) ctx.expected(at, "an integer >= 0 or \"*\"", value);
      filter.tags[name] = *index;
    }
  }
  return filter;
}

// ---- Objects: a checked key set and typed getters (nullopt when absent).

class Object {
 public:
  Object(const Context& ctx, const json& value, std::string path, const Keys& allowed,
         const Keys& required = {})
      : ctx_(ctx), value_(read_object(ctx, path, value)), path_(std::move(path)) {
    for (const auto& item : value_.items()) {
      if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
        ctx.fail(at(item.key()), "unknown key; expected one of " + joined(allowed, false));
      }
    }
    for (std::string_view key : required) {
      if (!value_.contains(key))
        ctx.fail(path_, "missing required key \"" + std::string(key) + "\"");
    }
  }

  const Context& ctx() const { return ctx_; }
  const std::string& path() const { return path_; }
  std::string at(std::string_view key) const { return child_path(path_, key); }
  const json* find(std::string_view key) const {
    auto it = value_.find(key);
    return it == value_.end() ? nullptr : &*it;
  }
  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    ctx_.fail(at(key), what);
  }

  // get(key, reader, args...) = reader(ctx, path-of-key, value, args...), or
  // nullopt when the key is absent.
  template <typename Reader, typename... Args>
  auto get(std::string_view key, Reader reader, Args&&... args) const -> std::optional<
      std::invoke_result_t<Reader, const Context&, const std::string&, const json&, Args...>> {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    return reader(ctx_, at(key), *v, std::forward<Args>(args)...);
  }

  std::optional<int64_t> integer(std::string_view key, int64_t min, int64_t max = kMaxInt) const {
    return get(key, read_int, min, max);
  }
  std::optional<double> number(std::string_view key, Range range) const {
    return get(key, read_number, range);
  }
  std::optional<bool> boolean(std::string_view key) const { return get(key, read_bool); }
  std::string string(std::string_view key, std::string fallback) const {
    return get(key, read_string).value_or(std::move(fallback));
  }
  std::optional<std::string> choice(std::string_view key, const Keys& options) const {
    return get(key, read_choice, options);
  }
  std::optional<std::string> tag_name(std::string_view key) const {
    return get(key, read_tag_name);
  }
  std::optional<std::vector<int64_t>> devices(std::string_view key) const {
    return get(key, read_devices);
  }
  Filter filter(std::string_view key) const { return get(key, read_filter).value_or(Filter{}); }

 private:
  const Context& ctx_;
  const json& value_;
  std::string path_;
};

// ---- Directives: keys (required ones listed in `required`) and a reader.

SplitDirective read_split(const Object& o) {
  return {.filter = o.filter("filter"),
          .dim_name = o.string("dim_name", ""),
          .num_microbatches = *o.integer("num_microbatches", 1, kMaxMicrobatches)};
}

PlaceDirective read_place(const Object& o) {
  return {.filter = o.filter("filter"),
          .devices = *o.devices("devices"),
          .axis = std::nullopt,
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
  ReplicateDirective d{
      .filter = o.filter("filter"), .devices = *o.devices("devices"), .axis = std::nullopt};
  d.bucket_size = o.integer("bucket_size", 1).value_or(kDefaultBucketSize);
  d.shard_params = params.value_or(false);
  d.shard_grads = grads.value_or(false) || d.shard_params;
  d.shard_optimizer = optimizer.value_or(false) || d.shard_grads;
  d.gather_stream = o.string("gather_stream", "dp_gather");
  d.reduce_stream = o.string("reduce_stream", "dp_reduce");
  return d;
}

ShardDirective read_shard(const Object& o) {
  ShardDirective d;
  d.filter = o.filter("filter");
  d.groups = {*o.devices("devices")};
  d.style = *o.choice("style", {"column", "row", "expert"});
  d.tag = o.tag_name("tag");
  if (d.style == "expert" && !d.tag) {
    o.ctx().fail(o.path(),
                 "missing required key \"tag\" (style \"expert\" needs the tag that "
                 "names experts)");
  }
  if (d.style != "expert" && d.tag) {
    o.fail("tag", "only valid with style \"expert\", not \"" + d.style + "\"");
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
  return d;
}

RecomputeDirective read_recompute(const Object& o) { return {.filter = o.filter("filter")}; }

PipelineDirective read_pipeline(const Object& o) {
  PipelineDirective d{.schedule = *o.choice("schedule", {"gpipe", "1f1b", "interleaved", "zb-h1",
                                                         "dualpipe", "dualpipev"}),
                      .tag = o.tag_name("tag").value_or("PP"),
                      .devices = *o.devices("devices"),
                      .axis = std::nullopt,
                      .num_microbatches = *o.integer("num_microbatches", 1, kMaxMicrobatches),
                      .chunks = o.integer("chunks", 1).value_or(1),
                      .auto_stages = o.choice("stages", {"auto"}).has_value()};
  if (d.chunks > 1 && d.schedule != "interleaved") {
    o.fail("chunks", "more than one chunk per device needs schedule \"interleaved\", not \"" +
                         d.schedule + "\"");
  }
  return d;
}

ZeroDirective read_zero(const Object& o) {
  return {.stage = *o.integer("stage", 0, 3),
          .devices = *o.devices("devices"),
          .axis = std::nullopt,
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
       {"op", "filter", "devices", "stream"},
       {"devices"},
       read_as<PlaceDirective, read_place>},
      {"replicate",
       {"op", "filter", "devices", "bucket_size", "shard_optimizer", "shard_grads", "shard_params",
        "gather_stream", "reduce_stream"},
       {"devices"},
       read_as<ReplicateDirective, read_replicate>},
      {"shard",
       {"op", "filter", "devices", "style", "tag", "stream"},
       {"devices", "style"},
       read_as<ShardDirective, read_shard>},
      {"order", {"op", "filters", "device"}, {"filters"}, read_as<OrderDirective, read_order>},
      {"recompute", {"op", "filter"}, {}, read_as<RecomputeDirective, read_recompute>},
      {"pipeline",
       {"op", "schedule", "tag", "devices", "num_microbatches", "chunks", "stages"},
       {"schedule", "devices", "num_microbatches"},
       read_as<PipelineDirective, read_pipeline>},
      {"zero",
       {"op", "stage", "devices", "bucket_size"},
       {"stage", "devices"},
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
  Object o(ctx, v, path,
           sgd ? Keys{"type", "lr", "momentum", "dampening", "nesterov", "weight_decay"}
               : Keys{"type", "lr", "betas", "eps", "weight_decay"});
  const Range positive{.min = 0, .min_open = true};
  const Range non_negative{.min = 0};
  opt.lr = o.number("lr", positive).value_or(sgd ? 0.01 : 0.001);
  opt.weight_decay = o.number("weight_decay", non_negative).value_or(sgd ? 0.0 : 0.01);
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
  const Context ctx(source_name);
  const json root = parse_json_text(text, source_name);
  Object top(ctx, root, "$",
             {"batch", "optimizer", "precision", "frozen", "annotations", "directives"}, {"batch"});
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
  if (const json* directives = top.find("directives")) {
    read_array(ctx, top.at("directives"), *directives, "directives {\"op\": ...}");
    for (size_t i = 0; i < directives->size(); ++i) {
      s.directives.push_back(read_directive(ctx, (*directives)[i], i));
    }
  }
  name_microbatches(ctx, s);
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
