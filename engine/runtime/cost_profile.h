// piper-run --profile-costs FILE: measures this machine's device and links for the cost model
// and writes them as a cluster file (formats/cluster.h, docs/cost-model.md) that piper-plan
// --cluster reads. No plan is needed. Every kernel family of profile_kernels.h is timed through
// the Backend at each of its sizes, and every collective and transfer through the communicators
// at sizes from 1 KiB to 64 MiB. Started as several ranks (piper-launch --ranks N, or a
// launcher's RANK and WORLD_SIZE with a rendezvous), all ranks time each kernel at the same
// moment, so that the profile describes one rank of a job that fills the machine as those ranks
// do (a CPU's cores and memory bandwidth shared), and again on rank 0 alone while the others
// idle (the kernel's times "alone", for the steps where a rank computes alone on its node), and
// the collectives run over groups of 2, 4, ... up to all of them; rank 0 writes FILE.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

namespace piper::engine {

struct CostProfileOptions {
  std::string path;  // the cluster file rank 0 writes (atomically)
  std::string device = "cpu";
  std::string comm;                       // "gloo" or "nccl"; empty: default_communicator(device)
  std::optional<std::string> rendezvous;  // else the launcher's environment
  double timeout_s = 300;
  // Fewer and smaller sizes, each timed briefly: a check that the mode works, not a profile.
  bool quick = false;
};

// Measures and writes the profile, printing one line per kernel family and collective to `out`
// (rank 0). Throws piper::Error on any failure (an unknown device, a rank that does not come).
void profile_costs(const CostProfileOptions& options, std::ostream& out);

}  // namespace piper::engine
