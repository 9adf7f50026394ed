// What a launcher tells a rank: its rank, the world size and where the ranks
// meet, from piper-run's flags and the variables of the usual launchers:
//   rank        RANK (torchrun), OMPI_COMM_WORLD_RANK (mpirun), SLURM_PROCID (srun)
//   world size  WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS
//   rendezvous  --rendezvous URL, then PIPER_RENDEZVOUS, then tcp://MASTER_ADDR:MASTER_PORT
//               (MASTER_PORT + 1 under torchrun, TORCHELASTIC_RUN_ID set: torchrun's own
//               store holds MASTER_PORT)
// (the first that is set wins), and the job's secret for the tcp:// store,
// PIPER_RENDEZVOUS_TOKEN (piper-launch makes one when it is unset).
#pragma once

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

namespace piper::engine {

struct LaunchEnvironment {
  std::optional<int> rank;
  std::string rank_from;  // the variable it came from, e.g. "RANK"
  std::optional<int> world_size;
  std::string world_size_from;
  std::optional<std::string> rendezvous;
  // "--rendezvous", "PIPER_RENDEZVOUS", "MASTER_ADDR/MASTER_PORT" or kTorchrunRendezvous
  std::string rendezvous_from;
  std::string token;  // PIPER_RENDEZVOUS_TOKEN; empty when unset
};

// LaunchEnvironment::rendezvous_from of the store beside torchrun's.
inline constexpr char kTorchrunRendezvous[] =
    "MASTER_ADDR/MASTER_PORT + 1 (torchrun: TORCHELASTIC_RUN_ID is set)";

// The variable that holds the job's secret.
inline constexpr char kRendezvousTokenVariable[] = "PIPER_RENDEZVOUS_TOKEN";

using EnvironmentLookup = std::function<const char*(const char*)>;

// Reads the launcher's variables through `lookup` (getenv by default); `rendezvous_flag` is
// --rendezvous, empty when not given. Throws piper::Error naming a variable whose value is not
// a non-negative integer, or MASTER_ADDR without MASTER_PORT (and the reverse).
LaunchEnvironment read_launch_environment(const std::string& rendezvous_flag,
                                          const EnvironmentLookup& lookup = std::getenv);

// Whether `pattern` holds %r.
bool has_rank_pattern(const std::string& pattern);
// `pattern` with every %r replaced by `rank` (and %% by %).
std::string expand_rank(const std::string& pattern, int rank);

// Throws piper::Error when the launcher's rank or world size differ from the header of the plan
// at `plan_path` (rank `plan_rank` of `plan_world_size`).
void check_launch_against_plan(const LaunchEnvironment& launch, int plan_rank, int plan_world_size,
                               const std::string& plan_path);

// A parsed rendezvous URL: tcp://HOST:PORT or file:///absolute/dir.
struct RendezvousUrl {
  enum class Kind { kTcp, kFile };
  Kind kind = Kind::kTcp;
  std::string host;
  int port = 0;
  std::string path;
};

// Throws piper::Error quoting the URL and where it came from (`from`) when it is neither form.
RendezvousUrl parse_rendezvous_url(const std::string& url, const std::string& from);

// What rank 0 warns before it listens on a tcp:// rendezvous without a token on an address
// other hosts can reach ("" when there is nothing to warn of).
std::string open_rendezvous_warning(const RendezvousUrl& url, const std::string& token);

}  // namespace piper::engine
