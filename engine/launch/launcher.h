// piper-launch's logic: one piper-run per rank plan of a directory, on this
// machine, meeting through a tcp:// rendezvous on a free localhost port; their
// output prefixed by rank; Ctrl-C forwarded; and when one rank fails, the others
// stopped and the failure named.
#pragma once

#include <string>
#include <vector>

namespace piper::engine {

struct LaunchOptions {
  std::string plans_dir;  // holds rank0.plan, rank1.plan, ...
  // Without plans_dir: start this many ranks, none given a plan (piper-run --profile-costs).
  int ranks = 0;
  std::string piper_run;  // the piper-run to start; empty: the one next to this executable
  std::vector<std::string> run_args;  // passed to every piper-run after --plan and --rendezvous
  // After a rank fails (or Ctrl-C), how long the others get to exit on their own (and say what
  // they saw) before they are sent SIGTERM (and SIGCONT), then SIGKILL 2 s later.
  double grace_s = 5;
  // --trace: with %r, every rank's own file (passed on as it is); without, one file merging
  // every rank's trace on one clock (engine/launch/trace_merge.h), written atomically once every
  // rank has succeeded. Empty: none.
  std::string trace_path;
};

// DIR/rank<N>.plan for N = 0 .. count-1, in rank order. Throws piper::Error when the
// directory has none, or a rank in between is missing.
std::vector<std::string> find_rank_plans(const std::string& dir);

// The piper-run beside the running executable (/proc/self/exe).
std::string default_piper_run();

// Runs the job (one rank per plan of plans_dir, or `ranks` ranks) and returns piper-launch's exit
// status: 0 when every rank succeeded; 1 when a rank failed (after stopping the others, and naming
// the first rank that failed and how on stderr); 128 + signal when interrupted. Each child's stdout
// and stderr lines are copied to this process's stdout and stderr behind "[rank N] ". Throws
// piper::Error when nothing could be started (no plans, no piper-run, --plan among run_args).
int launch(const LaunchOptions& options);

}  // namespace piper::engine
