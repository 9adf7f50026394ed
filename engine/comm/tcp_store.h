// Piper's TCP rendezvous store (gloo has none): rank 0 hosts a TcpStoreServer
// where it is told, every rank (rank 0 too) talks to it through a TcpStore.
//
// Wire format, all integers little-endian: a message is a u32 payload length
// followed by the payload. A connection starts with a handshake, before which the
// server reads nothing else:
//   server: u8 ok, u8 protocol version, 32-byte random nonce
//   client: HMAC-SHA256(token, nonce) (32 bytes), i32 the rank it speaks for (-1: none)
//   server: u8 ok, or an error (wrong answer, too many connections) and it hangs up
// The token (PIPER_RENDEZVOUS_TOKEN; empty when unset) never travels. Then requests:
// u8 op, then strings as u32 length + bytes:
//   SET key value -> ok | GET key -> ok u8 found [value] | ADD key i64 -> ok i64
//   CHECK u32 n key*n -> ok u8*n | CREATE key value -> ok u8 created
// CREATE sets a key only if it is unset; a key made by CREATE is never replaced (SET on it is
// refused), which is how each rank registers once. Replies start with u8 status: 0 ok, 1 error
// followed by a message string. The server answers a malformed or oversized request with an
// error and closes the connection; a message once begun must arrive whole within
// message_timeout. Waiting is done by the client (CHECK in a loop), so a request never blocks
// the server or the client's connection for long.
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
#include <unordered_set>
#include <vector>

#include "engine/comm/socket.h"
#include "engine/comm/store.h"

namespace piper::engine {

// The largest request or reply either side accepts.
inline constexpr uint32_t kTcpStoreMaxMessageBytes = 64u << 20;

// Who a client is: the job's secret and the rank it speaks for (-1: none, e.g. a test).
struct StoreCredentials {
  std::string token;
  int rank = -1;
};

struct TcpStoreServerOptions {
  std::string token;  // the job's secret; empty: anyone who speaks the protocol gets in
  // Connections that passed the handshake served at once; one more is refused, naming this.
  int max_clients = 64;
  // Connections still in the handshake held at once: a new one drops the oldest, so that a
  // flood of silent connections cannot keep a rank out.
  int max_handshakes = 16;
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(5)};
  // For the rest of a message once its first byte came (a slow sender holds no thread forever).
  std::chrono::milliseconds message_timeout{std::chrono::seconds(30)};
};

class TcpStoreServer {
 public:
  // Listens on `host`:`port` (0: a free port, see port()) exactly as given and serves on its
  // own threads until destroyed. Throws piper::Error naming the address when it cannot listen.
  TcpStoreServer(const std::string& host, int port, TcpStoreServerOptions options = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // Clients connected now (in the handshake or past it).
  int connections() const;
  // Waits until at most `count` clients are connected, not counting those that speak for one
  // of `ignored_ranks`; false when `timeout` passed first.
  bool wait_for_connections_at_most(int count, std::chrono::milliseconds timeout,
                                    const std::vector<int>& ignored_ranks = {});

  // Handles one request payload; returns the reply payload. Throws on a malformed request.
  // Public so that the store's fuzz target (tests/fuzz/store_fuzz.cc) feeds it bytes.
  std::string handle(const std::string& request);

 private:
  struct Client {
    net::Socket socket;
    std::thread thread;
    bool done = false;
    bool dropped = false;  // shut down to make room; its thread is ending it
    bool authenticated = false;
    int rank = -1;
  };
  void accept_loop();
  // Makes room for a new connection in the handshake; called with mutex_ held.
  void drop_oldest_handshake_if_full();
  void serve(Client& client);
  // The server's side of the handshake; false (after telling the client why, when it
  // answered) when the client may not go on.
  bool admit(Client& client);

  TcpStoreServerOptions options_;
  net::Socket listener_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mutex_;  // guards clients_, data_, created_ and wakes connection waiters
  std::condition_variable changed_;
  std::list<Client> clients_;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_set<std::string> created_;  // keys made by CREATE: never replaced
};

class TcpStore : public Store {
 public:
  // Connects to the server at `host`:`port` and passes its handshake with `credentials`,
  // retrying until `connect_timeout` passes (the server may start later, or drop a handshake
  // in a flood). Throws piper::Error naming the address after that, or at once when the
  // server refuses the credentials or has no room.
  TcpStore(const std::string& host, int port, std::chrono::milliseconds connect_timeout,
           const StoreCredentials& credentials = {});

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool create(const std::string& key, const std::vector<char>& data) override;
  std::string describe() const override { return description_; }

  // The address of this end of the connection: the interface that reaches the server.
  std::string local_address() const;

 private:
  // Sends one request and returns the reply payload after its status byte; each request
  // completes within timeout(). Throws piper::Error naming the store.
  std::string request(const std::string& payload);
  // The client's side of the handshake; false when the server hung up before answering.
  bool handshake(const StoreCredentials& credentials, net::Deadline deadline);

  std::string description_;
  mutable std::mutex mutex_;  // one request at a time on the connection
  net::Socket socket_;
  bool broken_ = false;  // a request failed mid-way: the connection is out of step
};

}  // namespace piper::engine
