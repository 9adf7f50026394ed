// Writes that never leave a half-written file behind.
#pragma once

#include <string>
#include <string_view>

namespace piper::formats {

// Writes `bytes` to `path` through a temporary file in the same directory,
// renamed over `path` once complete. Throws piper::Error naming the path.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Reads a whole file; throws piper::Error naming the path when it cannot.
std::string read_file(const std::string& path);

}  // namespace piper::formats
