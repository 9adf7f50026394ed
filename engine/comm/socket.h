// Small blocking TCP helpers for the rendezvous store: listen, connect with retries,
// and whole-buffer reads and writes bounded by a deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace piper::engine::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// An owned socket descriptor; closed on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  // Wakes any thread blocked reading or accepting on this socket; the descriptor stays open.
  void shutdown() const;

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  int port = 0;
};

// Parses "HOST:PORT" or "[IPV6]:PORT"; throws piper::Error naming `what` when malformed.
HostPort parse_host_port(const std::string& text, const std::string& what);

// Whether `host` names this machine's loopback only: localhost, 127.0.0.0/8 or ::1.
bool is_loopback(const std::string& host);

// Binds `host`:`port` (port 0: a free port) and listens; throws piper::Error naming the address.
Socket listen_on(const std::string& host, int port);
// The port a socket is bound to.
int local_port(const Socket& socket);
// The numeric address of this end of a connected socket ("127.0.0.1").
std::string local_address(const Socket& socket);

// Connects to `host`:`port`, retrying while the connection is refused (the server may start
// later) until `deadline`; throws piper::Error naming the address and the last error.
Socket connect_to(const std::string& host, int port, Deadline deadline);

// Writes all `bytes`; throws piper::Error on an error or when `deadline` passes.
void write_all(const Socket& socket, const void* data, size_t bytes, Deadline deadline);
// Reads exactly `bytes`. Returns false when the peer closed the connection before the first
// byte; throws piper::Error on an error, on a close mid-way or when `deadline` passes.
bool read_all(const Socket& socket, void* data, size_t bytes, Deadline deadline);

}  // namespace piper::engine::net
