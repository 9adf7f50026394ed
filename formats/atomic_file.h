// Writes that never leave a half-written file behind.
#pragma once

#include <string>
#include <string_view>

namespace piper::formats {

// Writes `bytes` to `path` through a temporary file in the same directory,
// renamed over `path` once complete. Throws piper::Error naming the path.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Writes `bytes` to `path` and flushes it to the disk (fsync) before returning, for files whose
// folder is then committed by a rename (checkpoints). Throws piper::Error naming the path.
void write_file_synced(const std::string& path, std::string_view bytes);

// Flushes a folder's entries (new names, renames) to the disk. Throws naming the folder.
void sync_directory(const std::string& path);

// Reads a whole file; throws piper::Error naming the path when it cannot.
std::string read_file(const std::string& path);

}  // namespace piper::formats
