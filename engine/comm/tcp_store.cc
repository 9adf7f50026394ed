#include "engine/comm/tcp_store.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/comm/secret.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kCreate = 5 };
enum Status : uint8_t { kOk = 0, kError = 1 };

// 1 had no handshake; 2 starts every connection with one.
constexpr uint8_t kProtocolVersion = 2;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr uint32_t kAnswerBytes = kMacBytes + 4;

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
    return raw(value);
  }
  Writer& raw(const std::string& bytes) {
    out_ += bytes;
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
  std::string str() { return raw(u32()); }
  std::string raw(size_t size) { return std::string(take(size), size); }
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

// Reads one message whose first byte comes by `deadline` and whose rest follows within
// `once_begun` (and by `deadline`). False when the peer closed the connection cleanly before
// a message; throws Malformed for an empty length or one over `max_bytes`.
bool receive_message(const net::Socket& socket, std::string& payload, net::Deadline deadline,
                     std::chrono::milliseconds once_begun,
                     uint32_t max_bytes = kTcpStoreMaxMessageBytes) {
  std::string header(4, '\0');
  if (!net::read_all(socket, header.data(), 1, deadline)) return false;
  deadline = std::min(deadline, net::Clock::now() + once_begun);
  if (!net::read_all(socket, header.data() + 1, 3, deadline)) {
    throw Error("connection closed in the middle of a message");
  }
  const uint32_t size = Reader(header).u32();
  if (size == 0 || size > max_bytes) {
    throw Malformed("message of " + std::to_string(size) + " bytes (must be 1 to " +
                    std::to_string(max_bytes) + ")");
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

// What the client proves it holds: the token's HMAC of the server's nonce.
std::string handshake_answer(const std::string& token, const std::string& nonce) {
  return hmac_sha256(token, nonce);
}

}  // namespace

// ---- server ----

TcpStoreServer::TcpStoreServer(const std::string& host, int port, TcpStoreServerOptions options)
    : options_(std::move(options)),
      listener_(net::listen_on(host, port)),
      port_(net::local_port(listener_)) {
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
  for (const Client& client : clients_) count += !client.done && !client.dropped;
  return count;
}

bool TcpStoreServer::wait_for_connections_at_most(int count, std::chrono::milliseconds timeout,
                                                  const std::vector<int>& ignored_ranks) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] {
    int connected = 0;
    for (const Client& client : clients_) {
      const bool ignored = client.rank >= 0 && std::find(ignored_ranks.begin(), ignored_ranks.end(),
                                                         client.rank) != ignored_ranks.end();
      connected += !client.done && !client.dropped && !ignored;
    }
    return connected <= count;
  });
}

void TcpStoreServer::drop_oldest_handshake_if_full() {
  int waiting = 0;
  Client* oldest = nullptr;
  for (Client& client : clients_) {
    if (client.done || client.dropped || client.authenticated) continue;
    if (oldest == nullptr) oldest = &client;
    ++waiting;
  }
  // Its thread wakes, fails its read and ends the connection.
  if (waiting >= options_.max_handshakes && oldest != nullptr) {
    oldest->dropped = true;
    oldest->socket.shutdown();
  }
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
    drop_oldest_handshake_if_full();
    Client& client = clients_.emplace_back();
    client.socket = net::Socket(fd);
    client.thread = std::thread([this, &client] { serve(client); });
  }
}

bool TcpStoreServer::admit(Client& client) {
  const net::Deadline deadline = net::Clock::now() + options_.handshake_timeout;
  const std::string nonce = random_bytes(kNonceBytes);
  send_message(client.socket, Writer().u8(kOk).u8(kProtocolVersion).raw(nonce).take(), deadline);
  std::string answer;
  if (!receive_message(client.socket, answer, deadline, options_.handshake_timeout, kAnswerBytes)) {
    return false;
  }
  if (answer.size() != kAnswerBytes) {
    throw Malformed("handshake answer of " + std::to_string(answer.size()) + " bytes (must be " +
                    std::to_string(kAnswerBytes) + ")");
  }
  Reader in(answer);
  const std::string mac = in.raw(kMacBytes);
  const auto rank = static_cast<int32_t>(in.u32());
  std::string refusal;
  if (!equal_in_constant_time(mac, handshake_answer(options_.token, nonce))) {
    refusal =
        "the rendezvous token does not match: every rank needs the same "
        "PIPER_RENDEZVOUS_TOKEN";
  } else {
    std::lock_guard lock(mutex_);
    int admitted = 0;
    for (const Client& other : clients_) admitted += !other.done && other.authenticated;
    if (admitted >= options_.max_clients) {
      refusal = "the rendezvous store serves at most " + std::to_string(options_.max_clients) +
                " connections and has no room for another";
    } else {
      client.authenticated = true;
      client.rank = rank;
    }
  }
  send_message(client.socket, refusal.empty() ? Writer().u8(kOk).take() : error_reply(refusal),
               deadline);
  return refusal.empty();
}

void TcpStoreServer::serve(Client& client) {
  try {
    const bool admitted = admit(client);
    std::string request;
    // Between requests a client that passed the handshake may be idle for as long as it likes
    // (a rank's connection is idle while it trains); only strangers are timed out.
    while (!stopping_ && admitted &&
           receive_message(client.socket, request, kNoDeadline, options_.message_timeout)) {
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
      if (created_.count(key) != 0) {
        return error_reply("set: key '" + key + "' was created once and is never replaced");
      }
      data_[std::move(key)] = std::move(value);
      break;
    }
    case kCreate: {
      std::string key = in.str();
      std::string value = in.str();
      in.end();
      std::lock_guard lock(mutex_);
      const bool created = data_.emplace(key, std::move(value)).second;
      if (created) created_.insert(std::move(key));
      out.u8(created);
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

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds connect_timeout,
                   const StoreCredentials& credentials)
    : description_("tcp://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                   ":" + std::to_string(port)) {
  const net::Deadline deadline = net::Clock::now() + connect_timeout;
  for (;;) {
    try {
      socket_ = net::connect_to(host, port, deadline);
    } catch (const Error& error) {
      throw Error("no rendezvous store answered at " + description_ + " within " +
                  seconds_text(connect_timeout) + " s (" + error.what() + ")");
    }
    // A stopped server accepts (the kernel does) but never answers: the handshake ends with
    // the connect timeout, so that diagnose()'s short probes stay short; at least 1 s.
    if (handshake(credentials, std::max(deadline, net::Clock::now() + std::chrono::seconds(1)))) {
      return;
    }
    if (net::Clock::now() >= deadline) {
      throw Error("the rendezvous store at " + description_ +
                  " hung up in the handshake until the timeout of " +
                  seconds_text(connect_timeout) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool TcpStore::handshake(const StoreCredentials& credentials, net::Deadline deadline) {
  std::string challenge;
  try {
    if (!receive_message(socket_, challenge, deadline, std::chrono::seconds(5))) return false;
  } catch (const std::exception& error) {
    if (net::Clock::now() < deadline) return false;  // dropped in a flood: try again
    throw Error("the rendezvous store at " + description_ + " did not start the handshake (" +
                error.what() +
                "): its process is stopped or overloaded, or it is a piper-run of another version");
  }
  Reader in(challenge);
  if (in.u8() != kOk || challenge.size() != 2 + kNonceBytes) {
    throw Error("the rendezvous store at " + description_ + " sent a malformed handshake");
  }
  if (const uint8_t version = in.u8(); version != kProtocolVersion) {
    throw Error("the rendezvous store at " + description_ + " speaks protocol version " +
                std::to_string(version) + ", this piper-run " + std::to_string(kProtocolVersion) +
                ": run one version of Piper on every rank");
  }
  const std::string nonce = in.raw(kNonceBytes);
  std::string reply;
  try {
    send_message(socket_,
                 Writer()
                     .raw(handshake_answer(credentials.token, nonce))
                     .u32(static_cast<uint32_t>(credentials.rank))
                     .take(),
                 deadline);
    if (!receive_message(socket_, reply, deadline, std::chrono::seconds(5))) return false;
  } catch (const std::exception&) {
    return false;  // dropped in the middle: try again
  }
  Reader verdict(reply);
  if (verdict.u8() != kOk) {
    throw Error("the rendezvous store at " + description_ +
                " refused this connection: " + verdict.str());
  }
  return true;
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
    if (!receive_message(socket_, reply, deadline, timeout())) {
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

bool TcpStore::create(const std::string& key, const std::vector<char>& data) {
  const std::string reply =
      request(Writer().u8(kCreate).str(key).str(std::string(data.begin(), data.end())).take());
  return Reader(reply).u8() != 0;
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
