// A file mapped read-only into memory. Its pages are read as they are first touched and belong
// to the page cache, not to the process's anonymous memory, so a data file far larger than RAM
// can be read a window at a time.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace piper::formats {

class MappedFile {
 public:
  // Throws piper::Error naming `path` when it cannot be opened or mapped (or is a directory).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The whole file (empty for an empty file).
  std::string_view bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Drops the pages of bytes [offset, offset + length) from this process's resident set; they
  // stay in the page cache and are read again if touched. Reading a file through once then
  // leaves the resident set as it was, instead of growing it by the file's size.
  void release(size_t offset, size_t length) const;

 private:
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace piper::formats
