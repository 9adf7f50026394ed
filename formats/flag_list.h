// The comma-separated values of command-line flags (--token-inputs idx=0,tgt=1,
// --trace-steps 5,10-12): their entries and the counts in them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace piper::formats {

// The entries between commas, empty ones included ("a,,b" gives "a", "", "b"; "" gives ""),
// so that the caller names an empty entry in its error.
std::vector<std::string> split_commas(const std::string& text);

// Whether `text` is 1 to `max_digits` decimal digits (a count std::stoll takes, no sign).
bool is_count(const std::string& text, size_t max_digits);

}  // namespace piper::formats
