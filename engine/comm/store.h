// The rendezvous key-value store: what ranks use to meet, to exchange the
// addresses of their communicators and to tell each other that they failed.
// It is a gloo::rendezvous::Store, so gloo contexts connect through it.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace piper::engine {

class Store : public gloo::rendezvous::Store {
 public:
  // set: stores `data` under `key`, replacing an earlier value.
  // get: the value of `key`, waiting up to timeout() for it to be set; throws piper::Error
  //   naming the key after that.
  // wait: returns once every key is set; throws piper::Error naming the missing keys after
  //   `timeout` (timeout() when not given).
  using gloo::rendezvous::Store::wait;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout()); }

  // Adds `delta` to the integer under `key` (0 when unset) and returns the sum, atomically
  // across all clients.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Whether every key is set, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Sets `key` to `data` only if it is unset, atomically across all clients; false (changing
  // nothing) when it was set. Such a key is never replaced where the store can enforce it.
  virtual bool create(const std::string& key, const std::vector<char>& data) = 0;
  // Where the store is, for messages ("tcp://10.0.0.1:29500", "file:///shared/run").
  virtual std::string describe() const = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 private:
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};
};

// A duration for messages: "300", "0.5".
std::string seconds_text(std::chrono::milliseconds duration);

// Waits up to `timeout` in all for every key of `keys` and returns those still missing (empty
// when all are set). Works with any gloo store (each key is waited for on its own).
std::vector<std::string> wait_for_keys(gloo::rendezvous::Store& store,
                                       const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout);

}  // namespace piper::engine
