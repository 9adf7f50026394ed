// Strict JSON text for strategy files: duplicate keys refused, syntax errors
// reported as file:line:column.
#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/strategy.h"

namespace piper::strategy {
namespace {

using nlohmann::json;

// JSON paths as the validator writes them: $.key, $["odd key"], $.list[3].
std::string child_path(const std::string& path, const std::string& key) {
  const bool identifier = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0])) &&
                          std::all_of(key.begin(), key.end(), [](char c) {
                            return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                          });
  return identifier ? path + "." + key : path + "[" + json(key).dump() + "]";
}

// A first, SAX pass over the text that builds nothing: nlohmann::json keeps the last of
// duplicated keys, and a strategy file must not depend on that, so duplicates are refused
// naming their path; it also bounds the nesting, which would otherwise only end with the
// stack (a file nested 100,000 deep). A separate pass, not a parse callback, because
// nlohmann's callback parser rescans an array at the end of each of its objects: quadratic
// in the array's length (a million directives took minutes).
class StrictnessCheck : public nlohmann::json_sax<json> {
 public:
  static constexpr size_t kMaxDepth = 256;

  explicit StrictnessCheck(const std::string& source) : source_(source) {}

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& key) override {
    Frame& top = frames_.back();
    top.key = key;
    if (!top.keys.insert(key).second) {
      throw Error(source_ + ": " + path() + ": duplicate key (a key may appear once per object)");
    }
    return true;
  }
  // Rethrown as its own type, for parse_json_text to place in the text.
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& error) override {
    if (const auto* syntax = dynamic_cast<const json::parse_error*>(&error)) throw *syntax;
    if (const auto* range = dynamic_cast<const json::out_of_range*>(&error)) throw *range;
    throw Error(source_ + ": invalid JSON: " + error.what());
  }

 private:
  struct Frame {
    bool array = false;
    size_t count = 0;  // elements completed, for arrays
    std::string key;   // the current key, for objects
    std::set<std::string> keys;
  };

  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().count;
    return true;
  }
  bool open(bool array) {
    if (frames_.size() == kMaxDepth) {
      throw Error(source_ + ": " + path() + ": nested deeper than " + std::to_string(kMaxDepth) +
                  " levels; a strategy needs a handful");
    }
    frames_.emplace_back().array = array;
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }

  std::string path() const {
    std::string out = "$";
    for (const Frame& frame : frames_) {
      out =
          frame.array ? out + "[" + std::to_string(frame.count) + "]" : child_path(out, frame.key);
    }
    return out;
  }

  const std::string& source_;
  std::vector<Frame> frames_;
};

// "line:column" (both from 1; columns count bytes) of the byte at `offset`.
std::string position(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  const size_t line = 1 + std::count(text.begin(), text.begin() + offset, '\n');
  const size_t line_start = offset == 0 ? std::string::npos : text.rfind('\n', offset - 1);
  const size_t column = offset - (line_start == std::string::npos ? 0 : line_start + 1) + 1;
  return std::to_string(line) + ":" + std::to_string(column);
}

// nlohmann's message without its "[json.exception...] parse error at ...: " prefix.
std::string reason(const nlohmann::json::exception& e) {
  std::string what = e.what();
  if (size_t end = what.find("] "); end != std::string::npos) what = what.substr(end + 2);
  if (what.starts_with("parse error")) {
    if (size_t colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
  }
  return what;
}

}  // namespace

json parse_json_text(const std::string& text, const std::string& source) {
  try {
    StrictnessCheck check(source);
    json::sax_parse(text, &check);
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte counts the characters read, the offending one included.
    throw Error(source + ":" + position(text, e.byte == 0 ? 0 : e.byte - 1) +
                ": invalid JSON: " + reason(e));
  } catch (const json::exception& e) {
    // A number too large for a double ("number overflow parsing '1e400'")
    // comes without a position; the token it quotes finds one.
    std::string what = reason(e);
    size_t quote = what.find('\'');
    size_t end = quote == std::string::npos ? quote : what.find('\'', quote + 1);
    size_t at = end == std::string::npos ? std::string::npos
                                         : text.find(what.substr(quote + 1, end - quote - 1));
    throw Error(source + (at == std::string::npos ? "" : ":" + position(text, at)) +
                ": invalid JSON: " + what);
  }
}

}  // namespace piper::strategy
