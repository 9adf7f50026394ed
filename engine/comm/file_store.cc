#include "engine/comm/file_store.h"

#include <fcntl.h>
#include <gloo/rendezvous/file_store.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "formats/error.h"

namespace piper::engine {

// gloo's store, for its key-to-file mapping and its check().
class FileStore::Files : public gloo::rendezvous::FileStore {
 public:
  using gloo::rendezvous::FileStore::check;
  using gloo::rendezvous::FileStore::FileStore;
  using gloo::rendezvous::FileStore::objectPath;
};

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Writes `data` to a new temporary file beside `path` and returns its name.
std::string write_temporary(const std::string& path, const std::string& data) {
  static std::atomic<uint64_t> counter{0};
  const std::string temporary =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw Error("rendezvous store: cannot write '" + temporary + "'");
  return temporary;
}

// Writes `data` to `path` through a temporary file and a rename, so readers see all or nothing.
void write_file_atomically(const std::string& path, const std::string& data) {
  const std::string temporary = write_temporary(path, data);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw Error("rendezvous store: cannot rename '" + temporary + "' to '" + path + "': " + reason);
  }
}

}  // namespace

FileStore::FileStore(const std::string& path) : path_(path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error || !std::filesystem::is_directory(path)) {
    throw Error("rendezvous directory '" + path + "' cannot be created" +
                (error ? ": " + error.message() : ""));
  }
  try {
    files_ = std::make_unique<Files>(path);
  } catch (const std::exception& failure) {
    throw Error("rendezvous directory '" + path + "': " + failure.what());
  }
}

FileStore::~FileStore() = default;

void FileStore::set(const std::string& key, const std::vector<char>& data) {
  write_file_atomically(files_->objectPath(key), std::string(data.begin(), data.end()));
}

std::vector<char> FileStore::get(const std::string& key) {
  wait({key}, timeout());
  const std::string data = read_file(files_->objectPath(key));
  return std::vector<char>(data.begin(), data.end());
}

bool FileStore::check(const std::vector<std::string>& keys) { return files_->check(keys); }

bool FileStore::create(const std::string& key, const std::vector<char>& data) {
  const std::string path = files_->objectPath(key);
  const std::string temporary = write_temporary(path, std::string(data.begin(), data.end()));
  const int linked = ::link(temporary.c_str(), path.c_str());
  const int error = errno;
  std::remove(temporary.c_str());
  if (linked == 0) return true;
  if (error == EEXIST) return false;
  throw Error("rendezvous store: cannot create '" + path + "': " + std::strerror(error));
}

void FileStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!check(keys)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (const std::string& key : keys) {
        if (!check({key})) missing += (missing.empty() ? "'" : ", '") + key + "'";
      }
      throw Error("rendezvous store at " + describe() + ": waited " + seconds_text(timeout) +
                  " s for " + missing);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  // One lock file serializes every add() of every process sharing the directory.
  const std::string lock_path = path_ + "/.piper-add.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error("rendezvous store: cannot open '" + lock_path + "': " + std::strerror(errno));
  }
  struct Unlock {
    int fd;
    ~Unlock() {
      ::flock(fd, LOCK_UN);
      ::close(fd);
    }
  } unlock{fd};
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      throw Error("rendezvous store: cannot lock '" + lock_path + "': " + std::strerror(errno));
    }
  }
  const std::string path = files_->objectPath(key);
  int64_t value = 0;
  if (check({key})) {
    const std::string text = read_file(path);
    size_t used = 0;
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || text.empty()) {
      throw Error("rendezvous store: add: key '" + key + "' holds a value that is not an integer");
    }
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    throw Error("rendezvous store: add: key '" + key + "' holds " + std::to_string(value) +
                ", adding " + std::to_string(delta) + " passes int64");
  }
  write_file_atomically(path, std::to_string(sum));
  return sum;
}

}  // namespace piper::engine
