// tests/conformance/unsupported.txt: the node test cases Piper deliberately does not
// run. One entry a line: a case name or shell glob (fnmatch), whitespace, the reason.
// Blank lines and lines starting with '#' are ignored.
#pragma once

#include <string>
#include <vector>

namespace piper::conformance {

struct UnsupportedEntry {
  std::string pattern;
  std::string reason;
  int line = 0;
  int matches = 0;  // cases the pattern matched in this run
};

class UnsupportedList {
 public:
  // Parses `path`. Throws piper::Error naming the file and line for an entry without a reason.
  static UnsupportedList load(const std::string& path);
  static UnsupportedList parse(const std::string& text, const std::string& origin);

  // The first entry matching `case_name` (counting the match), or null.
  const UnsupportedEntry* match(const std::string& case_name);
  // Entries that matched no case: a stale list.
  std::vector<const UnsupportedEntry*> unused() const;

  const std::string& origin() const { return origin_; }
  const std::vector<UnsupportedEntry>& entries() const { return entries_; }

 private:
  std::string origin_;
  std::vector<UnsupportedEntry> entries_;
};

}  // namespace piper::conformance
