#include "engine/comm/tcp_store.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "formats/error.h"

namespace piper::engine {
namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4 };
enum Status : uint8_t { kOk = 0, kError = 1 };

// Thrown for a request that does not follow the wire format.
struct Malformed : Error {
  using Error::Error;
};

class Writer {
 public:
  Writer& u8(uint8_t value) {
    out_.push_back(static_cast<char>(value));
    return *this;
  }
  Writer& u32(uint32_t value) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& i64(int64_t value) {
    const auto bits = static_cast<uint64_t>(value);
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& str(const std::string& value) {
    u32(static_cast<uint32_t>(value.size()));
    out_ += value;
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint32_t u32() {
    const char* bytes = take(4);
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i)
      value |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    return value;
  }
  int64_t i64() {
    const char* bytes = take(8);
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i)
      value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    return static_cast<int64_t>(value);
  }
  std::string str() {
    const uint32_t size = u32();
    return std::string(take(size), size);
  }
  void end() const {
    if (next_ != in_.size()) {
      throw Malformed(std::to_string(in_.size() - next_) + " unexpected bytes at the end");
    }
  }

 private:
  const char* take(size_t bytes) {
    if (bytes > in_.size() - next_) {
      throw Malformed("truncated: needs " + std::to_string(bytes) + " more bytes at offset " +
                      std::to_string(next_) + " of " + std::to_string(in_.size()));
    }
    const char* at = in_.data() + next_;
    next_ += bytes;
    return at;
  }
  const std::string& in_;
  size_t next_ = 0;
};

void send_message(const net::Socket& socket, const std::string& payload, net::Deadline deadline) {
  const std::string framed = Writer().u32(static_cast<uint32_t>(payload.size())).take() + payload;
  net::write_all(socket, framed.data(), framed.size(), deadline);
}

// False when the peer closed the connection cleanly before a message; throws Malformed for an
// empty or oversized length.
bool receive_message(const net::Socket& socket, std::string& payload, net::Deadline deadline) {
  std::string header(4, '\0');
  if (!net::read_all(socket, header.data(), 4, deadline)) return false;
  const uint32_t size = Reader(header).u32();
  if (size == 0 || size > kTcpStoreMaxMessageBytes) {
    throw Malformed("message of " + std::to_string(size) + " bytes (must be 1 to " +
                    std::to_string(kTcpStoreMaxMessageBytes) + ")");
  }
  // Grown as the bytes arrive, so that a peer claiming a large message holds only what it sent
  // (60 connections claiming 64 MiB each once reserved 4 GB).
  constexpr size_t kChunkBytes = size_t{64} << 10;
  payload.clear();
  while (payload.size() < size) {
    const size_t at = payload.size();
    const size_t chunk = std::min(kChunkBytes, size - at);
    payload.resize(at + chunk);
    if (!net::read_all(socket, payload.data() + at, chunk, deadline)) {
      throw Error("connection closed in the middle of a message");
    }
  }
  return true;
}

std::string error_reply(const std::string& message) {
  return Writer().u8(kError).str(message).take();
}

constexpr net::Deadline kNoDeadline = net::Deadline::max();

}  // namespace

// ---- server ----

TcpStoreServer::TcpStoreServer(const std::string& host, int port)
    : listener_(net::listen_on(host, port)), port_(net::local_port(listener_)) {
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  listener_.shutdown();
  acceptor_.join();
  std::list<Client> clients;
  {
    std::lock_guard lock(mutex_);
    for (Client& client : clients_) client.socket.shutdown();
    clients.swap(clients_);
  }
  for (Client& client : clients) client.thread.join();
}

int TcpStoreServer::connections() const {
  std::lock_guard lock(mutex_);
  int count = 0;
  for (const Client& client : clients_) count += !client.done;
  return count;
}

bool TcpStoreServer::wait_for_connections_at_most(int count, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] {
    int connected = 0;
    for (const Client& client : clients_) connected += !client.done;
    return connected <= count;
  });
}

void TcpStoreServer::accept_loop() {
  while (!stopping_) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        continue;
      }
      return;  // the listener was shut down
    }
    std::lock_guard lock(mutex_);
    // Forget clients that left, so a long run does not accumulate them.
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (it->done) {
        it->thread.join();
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
    Client& client = clients_.emplace_back();
    client.socket = net::Socket(fd);
    client.thread = std::thread([this, &client] { serve(client); });
  }
}

void TcpStoreServer::serve(Client& client) {
  try {
    std::string request;
    while (!stopping_ && receive_message(client.socket, request, kNoDeadline)) {
      std::string reply;
      bool close_after = false;
      try {
        reply = handle(request);
      } catch (const Malformed& error) {
        reply = error_reply(std::string("malformed request: ") + error.what());
        close_after = true;
      }
      send_message(client.socket, reply, net::Clock::now() + std::chrono::seconds(10));
      if (close_after) break;
    }
  } catch (const Malformed& error) {
    try {
      send_message(client.socket, error_reply(std::string("malformed request: ") + error.what()),
                   net::Clock::now() + std::chrono::seconds(1));
    } catch (const std::exception&) {
    }
  } catch (const std::exception&) {
    // A broken connection ends this client only.
  }
  client.socket.shutdown();
  {
    std::lock_guard lock(mutex_);
    client.done = true;
  }
  changed_.notify_all();
}

std::string TcpStoreServer::handle(const std::string& request) {
  Reader in(request);
  const uint8_t op = in.u8();
  Writer out;
  out.u8(kOk);
  switch (op) {
    case kSet: {
      std::string key = in.str();
      std::string value = in.str();
      in.end();
      std::lock_guard lock(mutex_);
      data_[std::move(key)] = std::move(value);
      break;
    }
    case kGet: {
      const std::string key = in.str();
      in.end();
      std::lock_guard lock(mutex_);
      const auto found = data_.find(key);
      out.u8(found != data_.end());
      if (found != data_.end()) out.str(found->second);
      break;
    }
    case kAdd: {
      std::string key = in.str();
      const int64_t delta = in.i64();
      in.end();
      std::lock_guard lock(mutex_);
      std::string& value = data_[key];
      int64_t current = 0;
      if (!value.empty()) {
        size_t used = 0;
        try {
          current = std::stoll(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != value.size()) {
          return error_reply("add: key '" + key + "' holds a value that is not an integer");
        }
      }
      if (__builtin_add_overflow(current, delta, &current)) {
        return error_reply("add: key '" + key + "' holds " + value + ", adding " +
                           std::to_string(delta) + " passes int64");
      }
      value = std::to_string(current);
      out.i64(current);
      break;
    }
    case kCheck: {
      const uint32_t count = in.u32();
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < count; ++i) keys.push_back(in.str());
      in.end();
      std::lock_guard lock(mutex_);
      for (const std::string& key : keys) out.u8(data_.count(key) != 0);
      break;
    }
    default:
      throw Malformed("unknown operation " + std::to_string(op));
  }
  return out.take();
}

// ---- client ----

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds connect_timeout)
    : description_("tcp://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                   ":" + std::to_string(port)) {
  try {
    socket_ = net::connect_to(host, port, net::Clock::now() + connect_timeout);
  } catch (const Error& error) {
    throw Error("no rendezvous store answered at " + description_ + " within " +
                seconds_text(connect_timeout) + " s (" + error.what() + ")");
  }
}

std::string TcpStore::local_address() const { return net::local_address(socket_); }

std::string TcpStore::request(const std::string& payload) {
  std::lock_guard lock(mutex_);
  if (broken_) {
    throw Error("the connection to the rendezvous store at " + description_ +
                " failed earlier and is closed");
  }
  const net::Deadline deadline = net::Clock::now() + timeout();
  std::string reply;
  try {
    send_message(socket_, payload, deadline);
    if (!receive_message(socket_, reply, deadline)) {
      throw Error("the store closed the connection");
    }
  } catch (const std::exception& error) {
    broken_ = true;
    throw Error("rendezvous store at " + description_ + ": " + error.what());
  }
  Reader in(reply);
  const uint8_t status = in.u8();
  if (status != kOk) {
    throw Error("rendezvous store at " + description_ + " refused a request: " + in.str());
  }
  return reply.substr(1);
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  request(Writer().u8(kSet).str(key).str(std::string(data.begin(), data.end())).take());
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key}, timeout());
  const std::string reply = request(Writer().u8(kGet).str(key).take());
  Reader in(reply);
  if (in.u8() == 0) throw Error("rendezvous store at " + description_ + ": no key '" + key + "'");
  const std::string value = in.str();
  return std::vector<char>(value.begin(), value.end());
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  Writer out;
  out.u8(kCheck).u32(static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) out.str(key);
  const std::string reply = request(out.take());
  Reader in(reply);
  bool all = true;
  for (size_t i = 0; i < keys.size(); ++i) all = in.u8() != 0 && all;
  return all;
}

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  const net::Deadline deadline = net::Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!check(keys)) {
    if (net::Clock::now() >= deadline) {
      std::string missing;
      for (const std::string& key : keys) {
        if (!check({key})) missing += (missing.empty() ? "'" : ", '") + key + "'";
      }
      throw Error("rendezvous store at " + description_ + ": waited " + seconds_text(timeout) +
                  " s for " + missing);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  const std::string reply = request(Writer().u8(kAdd).str(key).i64(delta).take());
  return Reader(reply).i64();
}

}  // namespace piper::engine
