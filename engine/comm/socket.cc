#include "engine/comm/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "formats/error.h"

namespace piper::engine::net {
namespace {

std::string address_text(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) freeaddrinfo(list);
  }
};

void resolve(const std::string& host, int port, bool passive, AddrInfo& result) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  const int status =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result.list);
  if (status != 0) {
    throw Error("cannot resolve host '" + host + "': " + gai_strerror(status));
  }
}

// Milliseconds left before `deadline`, for poll(): at least 0, at most a day.
int poll_ms(Deadline deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 86'400'000));
}

// Waits until the socket is ready for `events`; false when the deadline passed first.
bool wait_ready(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, poll_ms(deadline));
    if (ready > 0) return true;
    if (ready == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) throw Error(std::string("poll: ") + std::strerror(errno));
  }
}

}  // namespace

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

HostPort parse_host_port(const std::string& text, const std::string& what) {
  HostPort result;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw Error(what + ": '" + text + "' is not [IPV6]:PORT");
    }
    result.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw Error(what + ": '" + text + "' is not HOST:PORT");
    }
    result.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(port) > 65535) {
    throw Error(what + ": '" + text + "' has no valid port (0-65535)");
  }
  result.port = std::stoi(port);
  return result;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

Socket listen_on(const std::string& host, int port) {
  AddrInfo info;
  resolve(host, port, true, info);
  std::string last_error = "no address";
  for (addrinfo* entry = info.list; entry != nullptr; entry = entry->ai_next) {
    Socket socket(
        ::socket(entry->ai_family, entry->ai_socktype | SOCK_CLOEXEC, entry->ai_protocol));
    if (!socket.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(socket.fd(), entry->ai_addr, entry->ai_addrlen) != 0 ||
        ::listen(socket.fd(), 128) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    return socket;
  }
  throw Error("cannot listen on " + address_text(host, port) + ": " + last_error +
              (last_error == std::strerror(EADDRNOTAVAIL)
                   ? " (the host must be an address of this machine)"
                   : ""));
}

int local_port(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw Error(std::string("getsockname: ") + std::strerror(errno));
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

std::string local_address(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw Error(std::string("getsockname: ") + std::strerror(errno));
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw =
      address.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&address)->sin_addr);
  if (::inet_ntop(address.ss_family, raw, text, sizeof text) == nullptr) {
    throw Error(std::string("inet_ntop: ") + std::strerror(errno));
  }
  return text;
}

Socket connect_to(const std::string& host, int port, Deadline deadline) {
  std::string last_error;
  for (;;) {
    try {
      AddrInfo info;
      resolve(host, port, false, info);
      for (addrinfo* entry = info.list; entry != nullptr; entry = entry->ai_next) {
        Socket socket(
            ::socket(entry->ai_family, entry->ai_socktype | SOCK_CLOEXEC, entry->ai_protocol));
        if (!socket.valid()) {
          last_error = std::strerror(errno);
          continue;
        }
        if (::connect(socket.fd(), entry->ai_addr, entry->ai_addrlen) == 0) {
          const int one = 1;
          ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          return socket;
        }
        last_error = std::strerror(errno);
      }
    } catch (const Error& error) {
      last_error = error.what();  // the name may not resolve yet
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error("cannot connect to " + address_text(host, port) + ": " + last_error);
}

void write_all(const Socket& socket, const void* data, size_t bytes, Deadline deadline) {
  const char* next = static_cast<const char*>(data);
  while (bytes > 0) {
    if (!wait_ready(socket.fd(), POLLOUT, deadline)) throw Error("timed out sending");
    const ssize_t sent = ::send(socket.fd(), next, bytes, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error(std::string("send: ") + std::strerror(errno));
    }
    next += sent;
    bytes -= static_cast<size_t>(sent);
  }
}

bool read_all(const Socket& socket, void* data, size_t bytes, Deadline deadline) {
  char* next = static_cast<char*>(data);
  const size_t total = bytes;
  while (bytes > 0) {
    if (!wait_ready(socket.fd(), POLLIN, deadline)) throw Error("timed out receiving");
    const ssize_t got = ::recv(socket.fd(), next, bytes, 0);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error(std::string("recv: ") + std::strerror(errno));
    }
    if (got == 0) {
      if (bytes == total) return false;
      throw Error("connection closed in the middle of a message");
    }
    next += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace piper::engine::net
