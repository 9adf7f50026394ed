#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "formats/error.h"

namespace piper::formats {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw Error("cannot read '" + path + "': " + why);
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    fail(path, std::strerror(error));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    fail(path, "it is a directory");
  }
  size_ = static_cast<size_t>(info.st_size);
  if (size_ > 0) {  // mmap refuses a length of 0
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      fail(path, std::string("mmap: ") + std::strerror(error));
    }
    data_ = static_cast<const char*>(mapped);
  }
  ::close(fd);  // the mapping keeps the file
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

void MappedFile::release(size_t offset, size_t length) const {
  if (data_ == nullptr || length == 0 || offset >= size_) return;
  static const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(size_, offset + length);
  // Best effort: a failure leaves the pages resident, which costs memory, not correctness.
  ::madvise(const_cast<char*>(data_) + begin, end - begin, MADV_DONTNEED);
}

}  // namespace piper::formats
