// The value readers of strategy_reader.h.
#include "formats/strategy_reader.h"

#include <cctype>

namespace piper::strategy::reader {

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
                 int64_t max) {
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
  for (size_t i = 0; i < devices.size(); ++i) check_in_mesh(ctx, index_path(path, i), devices[i]);
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

}  // namespace piper::strategy::reader
