#include "formats/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/error.h"

namespace piper::formats {

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw Error("cannot write '" + temporary + "': " + std::strerror(errno));
    }
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw Error("cannot write '" + path + "': " + std::strerror(errno));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error("cannot write '" + path + "': " + error.message());
  }
}

void write_file_synced(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot write '" + path + "': " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int saved = errno;
      ::close(fd);
      throw Error("cannot write '" + path + "': " + std::strerror(saved));
    }
    done += static_cast<size_t>(wrote);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    throw Error("cannot flush '" + path + "' to the disk: " + std::strerror(errno));
  }
}

void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open folder '" + path + "': " + std::strerror(errno));
  const int result = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (result != 0) throw Error("cannot flush folder '" + path + "': " + std::strerror(saved));
}

std::string read_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw Error("cannot read '" + path + "': it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("cannot read '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    throw Error("cannot read '" + path + "': " + std::strerror(errno));
  }
  return std::move(contents).str();
}

}  // namespace piper::formats
