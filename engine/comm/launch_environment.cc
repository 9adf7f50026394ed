#include "engine/comm/launch_environment.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "engine/comm/socket.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

// The first of `names` that is set, parsed as a non-negative integer.
std::optional<int> first_number(const std::vector<const char*>& names,
                                const EnvironmentLookup& lookup, std::string& from) {
  for (const char* name : names) {
    const char* value = lookup(name);
    if (value == nullptr || *value == '\0') continue;
    const std::string text = value;
    if (text.size() > 9 || !std::all_of(text.begin(), text.end(),
                                        [](unsigned char c) { return std::isdigit(c) != 0; })) {
      throw Error(std::string(name) + "='" + text + "' is not a non-negative integer");
    }
    from = name;
    return std::stoi(text);
  }
  return std::nullopt;
}

// Under torchrun, whose own c10d store holds MASTER_PORT, Piper's store takes the port after.
int torchrun_store_port(const std::string& master_port) {
  const bool digits = !master_port.empty() && master_port.size() <= 5 &&
                      std::all_of(master_port.begin(), master_port.end(),
                                  [](unsigned char c) { return std::isdigit(c) != 0; });
  const int port = digits ? std::stoi(master_port) : -1;
  if (port < 1 || port > 65534) {
    throw Error("MASTER_PORT='" + master_port +
                "' under torchrun (TORCHELASTIC_RUN_ID is set): Piper's store listens on "
                "MASTER_PORT + 1, beside torchrun's own store, so MASTER_PORT must be a port "
                "from 1 to 65534");
  }
  return port + 1;
}

}  // namespace

LaunchEnvironment read_launch_environment(const std::string& rendezvous_flag,
                                          const EnvironmentLookup& lookup) {
  LaunchEnvironment launch;
  launch.rank =
      first_number({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, lookup, launch.rank_from);
  launch.world_size = first_number({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, lookup,
                                   launch.world_size_from);
  auto variable = [&](const char* name) -> std::string {
    const char* value = lookup(name);
    return value == nullptr ? "" : value;
  };
  launch.token = variable(kRendezvousTokenVariable);
  if (!rendezvous_flag.empty()) {
    launch.rendezvous = rendezvous_flag;
    launch.rendezvous_from = "--rendezvous";
  } else if (const std::string url = variable("PIPER_RENDEZVOUS"); !url.empty()) {
    launch.rendezvous = url;
    launch.rendezvous_from = "PIPER_RENDEZVOUS";
  } else {
    const std::string address = variable("MASTER_ADDR");
    std::string port = variable("MASTER_PORT");
    if (!address.empty() && !port.empty()) {
      launch.rendezvous_from = "MASTER_ADDR/MASTER_PORT";
      if (!variable("TORCHELASTIC_RUN_ID").empty()) {
        port = std::to_string(torchrun_store_port(port));
        launch.rendezvous_from = kTorchrunRendezvous;
      }
      launch.rendezvous = "tcp://" +
                          (address.find(':') != std::string::npos ? "[" + address + "]" : address) +
                          ":" + port;
    } else if (!address.empty() || !port.empty()) {
      throw Error(std::string(address.empty() ? "MASTER_PORT" : "MASTER_ADDR") + " is set but " +
                  (address.empty() ? "MASTER_ADDR" : "MASTER_PORT") +
                  " is not; set both (or PIPER_RENDEZVOUS, or --rendezvous)");
    }
  }
  return launch;
}

bool has_rank_pattern(const std::string& pattern) {
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] == '%') {
      if (pattern[i + 1] == 'r') return true;
      ++i;  // skip the escaped character
    }
  }
  return false;
}

std::string expand_rank(const std::string& pattern, int rank) {
  std::string result;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() &&
        (pattern[i + 1] == 'r' || pattern[i + 1] == '%')) {
      result += pattern[i + 1] == 'r' ? std::to_string(rank) : "%";
      ++i;
    } else {
      result += pattern[i];
    }
  }
  return result;
}

void check_launch_against_plan(const LaunchEnvironment& launch, int plan_rank, int plan_world_size,
                               const std::string& plan_path) {
  const std::string plan = plan_path + " is rank " + std::to_string(plan_rank) + " of " +
                           std::to_string(plan_world_size);
  if (launch.rank && *launch.rank != plan_rank) {
    throw Error("the launcher says this is rank " + std::to_string(*launch.rank) + " (" +
                launch.rank_from + ") but " + plan + "; give each rank its own plan (--plan " +
                "plans/rank%r.plan)");
  }
  if (launch.world_size && *launch.world_size != plan_world_size) {
    throw Error("the launcher started " + std::to_string(*launch.world_size) + " ranks (" +
                launch.world_size_from + ") but " + plan + "; start as many ranks as the plan " +
                "has, or plan for " + std::to_string(*launch.world_size));
  }
}

RendezvousUrl parse_rendezvous_url(const std::string& url, const std::string& from) {
  RendezvousUrl parsed;
  const std::string what = "rendezvous '" + url + "' (" + from + ")";
  if (url.rfind("tcp://", 0) == 0) {
    const net::HostPort address = net::parse_host_port(url.substr(6), what);
    parsed.kind = RendezvousUrl::Kind::kTcp;
    parsed.host = address.host;
    parsed.port = address.port;
    if (parsed.port == 0) throw Error(what + " needs a port other than 0");
    return parsed;
  }
  if (url.rfind("file://", 0) == 0) {
    parsed.kind = RendezvousUrl::Kind::kFile;
    parsed.path = url.substr(7);
    if (parsed.path.empty() || parsed.path[0] != '/') {
      throw Error(what + " needs an absolute directory: file:///shared/dir");
    }
    return parsed;
  }
  throw Error(what + " is neither tcp://HOST:PORT nor file:///shared/dir");
}

std::string open_rendezvous_warning(const RendezvousUrl& url, const std::string& token) {
  if (url.kind != RendezvousUrl::Kind::kTcp || !token.empty() || net::is_loopback(url.host)) {
    return "";
  }
  return "the rendezvous store listens on " + url.host + ":" + std::to_string(url.port) +
         " without a token: any host that reaches the port can join the job, read its keys or "
         "take a rank's place; set " +
         kRendezvousTokenVariable + " to the same secret on every rank (e.g. export " +
         kRendezvousTokenVariable + "=$(openssl rand -hex 32) before srun or mpirun)";
}

}  // namespace piper::engine
