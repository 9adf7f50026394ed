// The reading machinery shared by the strategy parser (strategy_parse.cc), its mesh
// part (strategy_mesh.cc) and the cluster file (cluster.cc); not for use outside
// formats/. A Context names the file in every error; each reader checks one JSON value
// and names its path when it is wrong; an Object checks a key set and hands out typed
// values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "formats/error.h"
#include "formats/strategy.h"

namespace piper::strategy::reader {

using nlohmann::json;
using Keys = std::vector<std::string_view>;

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
// Bounds generous enough for thousands of ranks, so that a damaged or hostile file fails at
// once instead of running the planner out of time or memory.
constexpr size_t kMaxListEntries = 100000;  // directives, annotations, frozen globs
constexpr int64_t kMaxDevices = 65536;      // device indices are below this

// Letters, digits and _, not starting with a digit.
bool is_identifier(std::string_view name);
// "$.a" + "b" = "$.a.b"; a key that is no identifier is quoted: $.a["b c"].
std::string child_path(const std::string& path, std::string_view key);
std::string index_path(const std::string& path, size_t index);
// The offending value as written, shortened so one message stays one line.
std::string shown(const json& value);
std::string joined(const Keys& words, bool quote);

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

const json& read_object(const Context& ctx, const std::string& path, const json& v);
// Also bounded to kMaxListEntries entries.
const json& read_array(const Context& ctx, const std::string& path, const json& v,
                       const std::string& of);
// An integer, also written 32.0 (as in JSON Schema); nullopt for anything else.
std::optional<int64_t> as_int64(const json& v);
int64_t read_int(const Context& ctx, const std::string& path, const json& v, int64_t min,
                 int64_t max = kMaxInt);

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

double read_number(const Context& ctx, const std::string& path, const json& v, Range range);
bool read_bool(const Context& ctx, const std::string& path, const json& v);
std::string read_string(const Context& ctx, const std::string& path, const json& v);
std::string read_choice(const Context& ctx, const std::string& path, const json& v,
                        const Keys& options);
// A user tag name: an identifier other than the reserved "MB" and "PASS".
void check_tag_name(const Context& ctx, const std::string& path, const std::string& name);
std::string read_tag_name(const Context& ctx, const std::string& path, const json& v);
// A device list: non-empty, distinct, each index below kMaxDevices and in the mesh.
std::vector<int64_t> read_devices(const Context& ctx, const std::string& path, const json& v);
Filter read_filter(const Context& ctx, const std::string& path, const json& v);

// ---- Meshes (strategy_mesh.cc).

// "mesh": [["dp", 2], ["tp", 2]]: named axes in order, each of size >= 1.
std::vector<MeshAxis> read_mesh(const Context& ctx, const std::string& path, const json& v);
// Whether the mesh has the device is the file's question; whether the directives use every
// device of the mesh is the planner's.
void check_in_mesh(const Context& ctx, const std::string& path, int64_t device);
// Once every directive is read: a pipeline with "axis" gets its replicas from the mesh (along
// "replica_axes", or every other axis of size > 1 that no shard splits over); "zero" and
// "bucket_size" without replicas, and a replicate or zero directive beside a pipeline that
// replicates its stages, are refused.
void resolve_pipeline_replicas(const Context& ctx, Strategy& s);

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

// The devices of place, replicate, pipeline and zero, from "devices" or "axis" (its leaders);
// exactly one of the two is given.
std::vector<int64_t> device_list(const Object& o);
// shard's groups, from "devices" (one list or a list of lists) or "axis".
std::vector<std::vector<int64_t>> device_groups(const Object& o);
// A pipeline's "replicas" (one device list per device of `devices`, holding it), checked;
// empty when absent. Also checks "replica_axes", which resolve_pipeline_replicas reads.
std::vector<std::vector<int64_t>> pipeline_replicas(const Object& o,
                                                    const std::vector<int64_t>& devices);

}  // namespace piper::strategy::reader
