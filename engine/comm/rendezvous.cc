#include "engine/comm/rendezvous.h"

#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "engine/comm/file_store.h"
#include "engine/comm/gloo/gloo_communicator.h"
#include "engine/comm/launch_environment.h"
#include "engine/comm/tcp_store.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string rank_key(const std::string& what, int rank) {
  return "piper/" + what + "/" + std::to_string(rank);
}

std::string plural_ranks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text;
}

std::string value_text(const std::vector<char>& value) {
  return std::string(value.begin(), value.end());
}

bool is_wildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host.empty();
}

// This machine's name when it resolves, else the loopback address.
std::string machine_address() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    if (::getaddrinfo(name, nullptr, &hints, &list) == 0) {
      ::freeaddrinfo(list);
      return name;
    }
  }
  return "127.0.0.1";
}

// Room for every rank's connections: its store and its heartbeat, and one more while it reports
// or diagnoses a failure; a few more for the second rank 0 asking who holds the port.
TcpStoreServerOptions server_options(const RendezvousOptions& options) {
  TcpStoreServerOptions server;
  server.token = options.token;
  server.max_clients = 3 * options.world_size + 8;
  server.max_handshakes = options.world_size + 8;
  return server;
}

constexpr char kNotResponding[] = " is not responding (no heartbeat for ";

}  // namespace

std::string not_responding_text(int rank, milliseconds window) {
  return "rank " + std::to_string(rank) + kNotResponding + seconds_text(window) +
         " s: killed, stopped or hung)";
}

std::vector<int> ranks_reported_not_responding(const std::string& message) {
  const std::string phrase = kNotResponding;
  std::vector<int> ranks;
  for (size_t at = message.find(phrase); at != std::string::npos;
       at = message.find(phrase, at + 1)) {
    size_t digits = at;
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(message[digits - 1])) != 0) {
      --digits;
    }
    if (digits == at || at - digits > 9 || digits < 5 ||
        message.compare(digits - 5, 5, "rank ") != 0)
      continue;
    const int rank = std::stoi(message.substr(digits, at - digits));
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
  }
  return ranks;
}

Rendezvous::Rendezvous(RendezvousOptions options) : options_(std::move(options)) {
  const RendezvousUrl url = parse_rendezvous_url(options_.url, options_.url_from);
  if (url.kind == RendezvousUrl::Kind::kTcp && options_.rank == 0) {
    try {
      server_ = std::make_unique<TcpStoreServer>(url.host, url.port, server_options(options_));
    } catch (const Error& error) {
      refuse_duplicate_rank0(error);
      throw;
    }
  }
  store_ = open_store(options_.timeout);
  if (url.kind == RendezvousUrl::Kind::kTcp) {
    gloo_hostname_ = is_wildcard(url.host) && options_.rank == 0
                         ? machine_address()
                         : static_cast<TcpStore&>(*store_).local_address();
  } else {
    gloo_hostname_ = machine_address();
  }
  register_rank();
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  try {
    wait_for_ranks();
    check_plan_ids();
  } catch (...) {
    {
      std::lock_guard lock(heartbeat_mutex_);
      stopping_ = true;
    }
    heartbeat_stop_.notify_all();
    heartbeat_.join();
    store_.reset();
    failed_ = true;
    linger();
    throw;
  }
  GlooOptions gloo;
  gloo.timeout = options_.timeout;
  gloo.hostname = gloo_hostname_;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr) gloo.iface = iface;
  gloo.key_prefix = "piper/" + options_.plan_id;
  gloo.diagnose = [this](const std::vector<int>& ranks) { return diagnose(ranks); };
  communicators_ = std::make_unique<GlooCommunicatorFactory>(*store_, options_.rank, gloo);
}

Rendezvous::~Rendezvous() {
  {
    std::lock_guard lock(heartbeat_mutex_);
    stopping_ = true;
  }
  heartbeat_stop_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  communicators_.reset();
  store_.reset();
  linger();
  server_.reset();
}

void Rendezvous::linger() {
  if (!server_) return;
  // The others may still read the store (a failure report, their last heartbeats); a stopped
  // rank never hangs up, so its connections are not waited for.
  const milliseconds limit =
      failed_ ? std::min(options_.linger, options_.diagnose_window + milliseconds(1000))
              : options_.linger;
  std::vector<int> silent;
  {
    std::lock_guard lock(diagnosed_mutex_);
    silent = not_responding_;
  }
  server_->wait_for_connections_at_most(0, limit, silent);
}

std::unique_ptr<Store> Rendezvous::open_store(milliseconds timeout) const {
  const RendezvousUrl url = parse_rendezvous_url(options_.url, options_.url_from);
  std::unique_ptr<Store> store;
  if (url.kind == RendezvousUrl::Kind::kTcp) {
    std::string host = url.host;
    if (is_wildcard(host)) host = host == "::" ? "::1" : "127.0.0.1";
    try {
      store = std::make_unique<TcpStore>(host, url.port, timeout,
                                         StoreCredentials{options_.token, options_.rank});
    } catch (const Error& error) {
      throw Error("rank " + std::to_string(options_.rank) + ": " + error.what() + " (" +
                  options_.url_from + "; rank 0 hosts the store)");
    }
  } else {
    store = std::make_unique<FileStore>(url.path);
  }
  store->set_timeout(timeout);
  return store;
}

void Rendezvous::refuse_duplicate_rank0(const Error& cannot_listen) const {
  // Whoever holds the port may be this job's rank 0 already: ask it, briefly.
  const std::string key = rank_key("rank", 0);
  nlohmann::json entry;
  try {
    const std::unique_ptr<Store> store = open_store(milliseconds(2000));
    if (!store->check({key})) return;
    entry = nlohmann::json::parse(value_text(store->get(key)), nullptr, false);
  } catch (const Error&) {
    return;  // not a Piper store: the listening error stands
  }
  if (entry.is_discarded() || entry.value("plan_id", std::string()) != options_.plan_id) return;
  throw Error("rank 0 is already running at " + options_.url + " (pid " +
              std::to_string(entry.value("pid", 0)) + " on " + entry.value("host", std::string()) +
              ", plan " + entry.value("plan", std::string()) +
              "): two processes were started as rank 0 (" + cannot_listen.what() + ")");
}

void Rendezvous::register_rank() {
  const int rank = options_.rank;
  if (rank < 0 || rank >= options_.world_size) {
    throw Error("rank " + std::to_string(rank) + " is outside the world size " +
                std::to_string(options_.world_size));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const nlohmann::json entry = {{"plan_id", options_.plan_id},
                                {"world_size", options_.world_size},
                                {"plan", options_.plan_path},
                                {"host", host},
                                {"pid", ::getpid()}};
  const std::string text = entry.dump();
  const std::string key = rank_key("rank", rank);
  if (store_->create(key, std::vector<char>(text.begin(), text.end()))) return;
  const nlohmann::json first = nlohmann::json::parse(value_text(store_->get(key)), nullptr, false);
  const std::string who = first.is_object()
                              ? " (first as pid " + std::to_string(first.value("pid", 0)) + " on " +
                                    first.value("host", std::string("?")) + ", plan " +
                                    first.value("plan", std::string("?")) + ")"
                              : "";
  throw Error("rank " + std::to_string(rank) + " registered twice at " + store_->describe() + who +
              ": two processes were started as rank " + std::to_string(rank) +
              (server_ || store_->describe().rfind("file://", 0) != 0
                   ? ""
                   : ", or the directory holds an earlier run's rendezvous (use an empty "
                     "directory per run)"));
}

void Rendezvous::wait_for_ranks() {
  const Clock::time_point start = Clock::now();
  std::vector<int> missing;
  for (int rank = 0; rank < options_.world_size; ++rank) missing.push_back(rank);
  auto pause = milliseconds(1);
  try {
    for (;;) {
      std::erase_if(missing, [&](int rank) { return store_->check({rank_key("rank", rank)}); });
      if (missing.empty()) return;
      if (Clock::now() - start >= options_.timeout) break;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, milliseconds(50));
    }
  } catch (const Error& error) {
    throw Error("rank " + std::to_string(options_.rank) + " lost the rendezvous store while " +
                "waiting for " + plural_ranks(missing) + " of " +
                std::to_string(options_.world_size) + ": " + error.what());
  }
  throw Error("rank " + std::to_string(options_.rank) + " waited " +
              seconds_text(std::chrono::duration_cast<milliseconds>(Clock::now() - start)) +
              " s at " + store_->describe() + " (" + options_.url_from + ") for " +
              plural_ranks(missing) + " of " + std::to_string(options_.world_size) +
              ", which did not start or could not reach the store");
}

void Rendezvous::check_plan_ids() {
  std::vector<nlohmann::json> entries;
  for (int rank = 0; rank < options_.world_size; ++rank) {
    const std::string text = value_text(store_->get(rank_key("rank", rank)));
    nlohmann::json entry = nlohmann::json::parse(text, nullptr, false);
    if (entry.is_discarded() || !entry.is_object() || !entry.contains("plan_id")) {
      throw Error("rank " + std::to_string(rank) + " registered at " + store_->describe() +
                  " with an unreadable entry '" + text + "'");
    }
    entries.push_back(std::move(entry));
  }
  auto describe = [&](int rank) {
    const nlohmann::json& entry = entries[static_cast<size_t>(rank)];
    return "rank " + std::to_string(rank) + (rank == options_.rank ? " (this rank, " : " (") +
           entry.value("plan", std::string("?")) + ") has plan id '" +
           entry.value("plan_id", std::string()) + "'";
  };
  std::string mismatches;
  for (int rank = 1; rank < options_.world_size; ++rank) {
    if (entries[static_cast<size_t>(rank)]["plan_id"] != entries[0]["plan_id"]) {
      mismatches += (mismatches.empty() ? "" : ", ") + describe(rank);
    }
  }
  if (!mismatches.empty()) {
    throw Error(
        "refusing to start: the ranks' plans come from different planning runs: " + describe(0) +
        " but " + mismatches + "; give every rank the plans of one piper-plan run");
  }
}

void Rendezvous::heartbeat_loop() {
  std::unique_ptr<Store> beat;
  std::unique_lock lock(heartbeat_mutex_);
  while (!stopping_) {
    lock.unlock();
    try {
      if (!beat) beat = open_store(milliseconds(1000));
      beat->add(rank_key("alive", options_.rank), 1);
    } catch (const std::exception&) {
      beat.reset();  // reconnect on the next beat
    }
    lock.lock();
    heartbeat_stop_.wait_for(lock, options_.heartbeat_period, [&] { return stopping_; });
  }
}

std::string Rendezvous::diagnose(const std::vector<int>& ranks) {
  if (ranks.empty()) return "";
  const bool hosted = server_ != nullptr || store_->describe().rfind("tcp://", 0) == 0;
  const std::string unreachable = "the rendezvous store at " + store_->describe() +
                                  " does not answer" +
                                  (hosted ? " (rank 0 hosts it: rank 0 is gone or stopped)" : "");
  try {
    std::unique_ptr<Store> probe = open_store(milliseconds(2000));
    std::vector<std::string> findings(ranks.size());
    auto read_failures = [&] {
      for (size_t i = 0; i < ranks.size(); ++i) {
        const std::string key = rank_key("failed", ranks[i]);
        if (findings[i].empty() && probe->check({key})) {
          findings[i] =
              "rank " + std::to_string(ranks[i]) + " failed: " + value_text(probe->get(key));
        }
      }
    };
    read_failures();
    std::vector<int64_t> before(ranks.size());
    bool watch = false;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!findings[i].empty()) continue;
      before[i] = probe->add(rank_key("alive", ranks[i]), 0);
      watch = true;
    }
    if (watch) {
      std::this_thread::sleep_for(options_.diagnose_window);
      read_failures();
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (!findings[i].empty()) continue;
        if (probe->add(rank_key("alive", ranks[i]), 0) == before[i]) {
          findings[i] = not_responding_text(ranks[i], options_.diagnose_window);
          std::lock_guard lock(diagnosed_mutex_);
          not_responding_.push_back(ranks[i]);
        }
      }
    }
    std::string text;
    for (const std::string& finding : findings) {
      if (!finding.empty()) text += (text.empty() ? "" : "; ") + finding;
    }
    return text;
  } catch (const std::exception&) {
    return unreachable;
  }
}

void Rendezvous::report_failure(const std::string& message) {
  failed_ = true;
  try {
    std::unique_ptr<Store> probe = open_store(milliseconds(2000));
    probe->set(rank_key("failed", options_.rank),
               std::vector<char>(message.begin(), message.end()));
  } catch (const std::exception&) {
    // The store is gone too; the others will find this rank not responding.
  }
}

}  // namespace piper::engine
