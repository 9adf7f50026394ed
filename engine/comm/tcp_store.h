// Piper's TCP rendezvous store (gloo has none): rank 0 hosts a TcpStoreServer
// where it is told, every rank (rank 0 too) talks to it through a TcpStore.
//
// Wire format, all integers little-endian: a message is a u32 payload length
// followed by the payload. Requests: u8 op, then strings as u32 length + bytes:
//   SET key value -> ok | GET key -> ok u8 found [value] | ADD key i64 -> ok i64
//   CHECK u32 n key*n -> ok u8*n
// Replies start with u8 status: 0 ok, 1 error followed by a message string. The
// server answers a malformed or oversized request with an error and closes the
// connection. Waiting is done by the client (CHECK in a loop), so a request never
// blocks the server or the client's connection for long.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "engine/comm/socket.h"
#include "engine/comm/store.h"

namespace piper::engine {

// The largest request or reply either side accepts.
inline constexpr uint32_t kTcpStoreMaxMessageBytes = 64u << 20;

class TcpStoreServer {
 public:
  // Listens on `host`:`port` (0: a free port, see port()) and serves on its own threads until
  // destroyed. Throws piper::Error naming the address when it cannot listen.
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // Clients connected now.
  int connections() const;
  // Waits until at most `count` clients are connected; false when `timeout` passed first.
  bool wait_for_connections_at_most(int count, std::chrono::milliseconds timeout);

  // Handles one request payload; returns the reply payload. Throws on a malformed request.
  // Public so that the store's fuzz target (tests/fuzz/store_fuzz.cc) feeds it bytes.
  std::string handle(const std::string& request);

 private:
  struct Client {
    net::Socket socket;
    std::thread thread;
    bool done = false;
  };
  void accept_loop();
  void serve(Client& client);

  net::Socket listener_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mutex_;  // guards clients_, data_ and wakes connection waiters
  std::condition_variable changed_;
  std::list<Client> clients_;
  std::unordered_map<std::string, std::string> data_;
};

class TcpStore : public Store {
 public:
  // Connects to the server at `host`:`port`, retrying until `connect_timeout` passes (the
  // server may start later). Throws piper::Error naming the address after that.
  TcpStore(const std::string& host, int port, std::chrono::milliseconds connect_timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  std::string describe() const override { return description_; }

  // The address of this end of the connection: the interface that reaches the server.
  std::string local_address() const;

 private:
  // Sends one request and returns the reply payload after its status byte; each request
  // completes within timeout(). Throws piper::Error naming the store.
  std::string request(const std::string& payload);

  std::string description_;
  mutable std::mutex mutex_;  // one request at a time on the connection
  net::Socket socket_;
  bool broken_ = false;  // a request failed mid-way: the connection is out of step
};

}  // namespace piper::engine
