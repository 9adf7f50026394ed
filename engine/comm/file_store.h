// The rendezvous store in a shared directory (file:///shared/dir), on top of
// gloo's FileStore (one file per key, written atomically): Piper's version lets a
// key be overwritten and adds add() and check().
#pragma once

#include <memory>
#include <string>

#include "engine/comm/store.h"

namespace piper::engine {

class FileStore : public Store {
 public:
  // Uses (and creates) directory `path`; throws piper::Error naming it when that fails.
  explicit FileStore(const std::string& path);
  ~FileStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  // Atomic through link(2), which fails on an existing name; a later set() may still replace
  // the key (whoever can write the directory can).
  bool create(const std::string& key, const std::vector<char>& data) override;
  std::string describe() const override { return "file://" + path_; }

 private:
  class Files;
  std::string path_;
  std::unique_ptr<Files> files_;
};

}  // namespace piper::engine
