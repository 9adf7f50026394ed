#include "formats/flag_list.h"

#include <algorithm>

namespace piper::formats {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> entries;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    entries.push_back(text.substr(begin, comma - begin));
    if (comma == std::string::npos) return entries;
    begin = comma + 1;
  }
}

bool is_count(const std::string& text, size_t max_digits) {
  return !text.empty() && text.size() <= max_digits &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace piper::formats
