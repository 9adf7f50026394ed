#include "tests/conformance/unsupported_list.h"

#include <fnmatch.h>

#include <fstream>
#include <sstream>

#include "formats/error.h"

namespace piper::conformance {

UnsupportedList UnsupportedList::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error("cannot read the unsupported-case list '" + path + "'");
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

UnsupportedList UnsupportedList::parse(const std::string& text, const std::string& origin) {
  UnsupportedList list;
  list.origin_ = origin;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') {
      continue;
    }
    const size_t pattern_end = line.find_first_of(" \t", start);
    const size_t reason_start = pattern_end == std::string::npos
                                    ? std::string::npos
                                    : line.find_first_not_of(" \t", pattern_end);
    if (reason_start == std::string::npos) {
      throw Error(origin + ":" + std::to_string(number) + ": entry '" + line.substr(start) +
                  "' has no reason; write the case (or glob) and why it is not supported");
    }
    UnsupportedEntry entry;
    entry.pattern = line.substr(start, pattern_end - start);
    entry.reason = line.substr(reason_start);
    while (!entry.reason.empty() && (entry.reason.back() == ' ' || entry.reason.back() == '\r')) {
      entry.reason.pop_back();
    }
    entry.line = number;
    list.entries_.push_back(entry);
  }
  return list;
}

const UnsupportedEntry* UnsupportedList::match(const std::string& case_name) {
  for (auto& entry : entries_) {
    if (fnmatch(entry.pattern.c_str(), case_name.c_str(), 0) == 0) {
      ++entry.matches;
      return &entry;
    }
  }
  return nullptr;
}

std::vector<const UnsupportedEntry*> UnsupportedList::unused() const {
  std::vector<const UnsupportedEntry*> stale;
  for (const auto& entry : entries_) {
    if (entry.matches == 0) stale.push_back(&entry);
  }
  return stale;
}

}  // namespace piper::conformance
