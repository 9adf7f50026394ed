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

// nlohmann::json keeps the last of duplicated keys; a strategy file must not
// depend on that, so the parser callback tracks where it is and refuses them.
class DuplicateKeyGuard {
 public:
  explicit DuplicateKeyGuard(const std::string& source) : source_(source) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames_.emplace_back().array = event == json::parse_event_t::array_start;
        break;
      case json::parse_event_t::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) {
          throw Error(source_ + ": " + path() +
                      ": duplicate key (a key may appear once per object)");
        }
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        [[fallthrough]];
      case json::parse_event_t::value:
        if (!frames_.empty() && frames_.back().array) ++frames_.back().count;
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool array = false;
    size_t count = 0;  // elements completed, for arrays
    std::string key;   // the current key, for objects
    std::set<std::string> keys;
  };

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
    return json::parse(text, DuplicateKeyGuard(source));
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
