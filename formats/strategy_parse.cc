// Parsing and validation of strategy files. One Object helper checks a key set
// and hands out typed values that name their JSON path when they are wrong;
// each directive is a row of rules() (its keys) and a short reader function.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
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
  // The strategy's mesh, read before the directives that name its axes and devices.
  const std::vector<MeshAxis>& mesh() const { return mesh_; }
  void set_mesh(std::vector<MeshAxis> mesh) { mesh_ = std::move(mesh); }
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw Error(source_ + ": " + path + ": " + what);
  }
  [[noreturn]] void expected(const std::string& path, const std::string& what,
                             const json& got) const {
    fail(path, "expected " + what + ", got " + shown(got));
  }

 private:
  std::string source_;
  std::vector<MeshAxis> mesh_;
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

std::string axis_names(const std::vector<MeshAxis>& mesh) {
  std::string names;
  for (const MeshAxis& axis : mesh) names += (names.empty() ? "" : ", ") + axis.name;
  return names;
}

// Whether the mesh has the device is the file's question; whether the directives use every
// device of the mesh is the planner's.
void check_in_mesh(const Context& ctx, const std::string& path, int64_t device) {
  const std::vector<MeshAxis>& mesh = ctx.mesh();
  const int64_t count = mesh_device_count(mesh);
  if (mesh.empty() || device < count) return;
  std::string shape;
  for (const MeshAxis& axis : mesh) {
    shape += (shape.empty() ? "" : " x ") + axis.name + " " + std::to_string(axis.size);
  }
  ctx.fail(path, "device " + std::to_string(device) + " is outside the mesh (" + shape +
                     ": devices 0 to " + std::to_string(count - 1) + ")");
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
  for (size_t i = 0; i < devices.size(); ++i) check_in_mesh(ctx, index_path(path, i), devices[i]);
  return devices;
}

// shard's "devices": a flat list is one group, a list of lists several, of one size and
// disjoint (every other directive names a group by its first device).
std::vector<std::vector<int64_t>> read_device_groups(const Context& ctx, const std::string& path,
                                                     const json& v) {
  if (!v.is_array() || v.empty() || !v[0].is_array()) return {read_devices(ctx, path, v)};
  read_array(ctx, path, v, "device lists");
  std::vector<std::vector<int64_t>> groups;
  std::map<int64_t, size_t> group_of;
  for (size_t g = 0; g < v.size(); ++g) {
    const std::string at = index_path(path, g);
    const std::vector<int64_t>& group = groups.emplace_back(read_devices(ctx, at, v[g]));
    if (group.size() != groups.front().size()) {
      ctx.fail(at, "has " + std::to_string(group.size()) + " devices, but " + index_path(path, 0) +
                       " has " + std::to_string(groups.front().size()) +
                       "; groups are the same size");
    }
    for (size_t i = 0; i < group.size(); ++i) {
      const auto [first, fresh] = group_of.emplace(group[i], g);
      if (!fresh) {
        ctx.fail(index_path(at, i), "device " + std::to_string(group[i]) + " is also in " +
                                        index_path(path, first->second) + "; groups are disjoint");
      }
    }
  }
  return groups;
}

// "axis": NAME, the index of that axis in the mesh.
size_t read_axis(const Context& ctx, const std::string& path, const json& v) {
  if (!v.is_string()) ctx.expected(path, "a mesh axis name (string)", v);
  const std::string& name = v.get_ref<const std::string&>();
  const std::vector<MeshAxis>& mesh = ctx.mesh();
  if (mesh.empty()) {
    ctx.fail(path, "\"" + name +
                       "\" names a mesh axis, but the strategy has no \"mesh\"; declare one "
                       "(\"mesh\": [[\"" +
                       name + "\", 2], ...]) or list \"devices\"");
  }
  auto it = std::find_if(mesh.begin(), mesh.end(),
                         [&](const MeshAxis& axis) { return axis.name == name; });
  if (it == mesh.end()) {
    ctx.fail(path, "unknown mesh axis \"" + name + "\"; the mesh's axes are " + axis_names(mesh));
  }
  return static_cast<size_t>(it - mesh.begin());
}

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

// "mesh": [["dp", 2], ["tp", 2]]: named axes in order, each of size >= 1.
std::vector<MeshAxis> read_mesh(const Context& ctx, const std::string& path, const json& v) {
  read_array(ctx, path, v, "[name, size] axes");
  if (v.empty()) ctx.expected(path, "a non-empty array of [name, size] axes", v);
  std::vector<MeshAxis> mesh;
  int64_t count = 1;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = index_path(path, i);
    const json& axis = v[i];
    if (!axis.is_array() || axis.size() != 2) {
      ctx.expected(at, "an axis [name, size], e.g. [\"tp\", 2]", axis);
    }
    if (!axis[0].is_string() || !is_identifier(axis[0].get_ref<const std::string&>())) {
      ctx.expected(at + "[0]", "an axis name (letters, digits and _, not starting with a digit)",
                   axis[0]);
    }
    const std::string& name = axis[0].get_ref<const std::string&>();
    for (size_t j = 0; j < mesh.size(); ++j) {
      if (mesh[j].name == name) {
        ctx.fail(at + "[0]", "axis \"" + mesh[j].name + "\" is already " + index_path(path, j) +
                                 "; axis names are unique");
      }
    }
    const int64_t size = read_int(ctx, at + "[1]", axis[1], 1, kMaxDevices);
    count *= size;
    if (count > kMaxDevices) {
      ctx.fail(at + "[1]", "makes a mesh of " + std::to_string(count) +
                               " devices; Piper takes at most " + std::to_string(kMaxDevices));
    }
    mesh.push_back({.name = name, .size = size});
  }
  return mesh;
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

// The mesh axis "axis" names, or nullopt when the directive lists "devices"; exactly one of
// the two is given.
std::optional<size_t> named_axis(const Object& o) {
  const json* axis = o.find("axis");
  const bool devices = o.find("devices") != nullptr;
  if (axis && devices) {
    o.fail("axis",
           "given with \"devices\"; give one of the two (\"axis\" names a mesh axis, "
           "\"devices\" lists devices)");
  }
  if (!axis && !devices) {
    o.ctx().fail(o.path(), "missing required key \"devices\" (or \"axis\", a mesh axis)");
  }
  if (!axis) return std::nullopt;
  return read_axis(o.ctx(), o.at("axis"), *axis);
}

// The devices of place, replicate, pipeline and zero: along an axis, its leaders.
std::vector<int64_t> device_list(const Object& o) {
  if (std::optional<size_t> axis = named_axis(o)) {
    return mesh_axis_leaders(o.ctx().mesh(), *axis);
  }
  return *o.devices("devices");
}

std::vector<std::vector<int64_t>> device_groups(const Object& o) {
  if (std::optional<size_t> axis = named_axis(o)) return mesh_axis_groups(o.ctx().mesh(), *axis);
  return *o.get("devices", read_device_groups);
}

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
                      .auto_stages = o.choice("stages", {"auto"}).has_value()};
  if (d.chunks > 1 && d.schedule != "interleaved") {
    o.fail("chunks", "more than one chunk per device needs schedule \"interleaved\", not \"" +
                         d.schedule + "\"");
  }
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
       {"op", "schedule", "tag", "devices", "axis", "num_microbatches", "chunks", "stages"},
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

// A pipeline along a mesh axis runs each stage on a leader. Another axis of size > 1 that no
// shard names would have to replicate whole pipelines, and the generator places one device
// per stage (planner/directives/expand.cc).
void check_pipeline_axes(const Context& ctx, const Strategy& s) {
  std::set<std::string> sharded;
  for (const Directive& directive : s.directives) {
    if (directive.op == "shard" && directive.json.contains("axis")) {
      sharded.insert(directive.json.at("axis").get<std::string>());
    }
  }
  for (const Directive& directive : s.directives) {
    if (directive.op != "pipeline" || !directive.json.contains("axis")) continue;
    const std::string name = directive.json.at("axis").get<std::string>();
    for (const MeshAxis& axis : s.mesh) {
      if (axis.name == name || axis.size == 1 || sharded.count(axis.name)) continue;
      ctx.fail(directive.path + ".axis",
               "a pipeline along mesh axis \"" + name + "\" beside axis \"" + axis.name +
                   "\" (size " + std::to_string(axis.size) +
                   ", which no shard directive names) would replicate whole pipelines; Piper "
                   "does not plan that yet (the pipeline generator places one device per "
                   "stage): list the pipeline's \"devices\" and replicate each stage with its "
                   "own replicate directive");
    }
  }
}

}  // namespace

Strategy parse_strategy(const std::string& text, const std::string& source_name) {
  Context ctx(source_name);
  const json root = parse_json_text(text, source_name);
  Object top(ctx, root, "$",
             {"batch", "optimizer", "precision", "frozen", "annotations", "mesh", "directives"},
             {"batch"});
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
  check_pipeline_axes(ctx, s);
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
