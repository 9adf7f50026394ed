// piper-launch: runs every rank plan of a directory as local piper-run processes.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "engine/launch/launcher.h"
#include "tools/command_line.h"

int main(int argc, char** argv) {
  piper::engine::LaunchOptions options;
  CLI::App app{
      "Starts one piper-run per DIR/rank<N>.plan (or --ranks N of them) on this machine, "
      "meeting through a tcp:// "
      "rendezvous on a free localhost port. Every other flag goes to each piper-run "
      "(--steps, --data, --metrics, --timeout, ...). Output lines are prefixed with their "
      "rank; Ctrl-C is passed on; when one rank fails the others are stopped and piper-launch "
      "exits non-zero naming it (or the rank the others reported as not responding). The ranks "
      "get PIPER_RENDEZVOUS_TOKEN, the job's secret for the store: a fresh random one unless "
      "it is set."};
  auto* plans_option =
      app.add_option("--plans", options.plans_dir, "Directory of rank0.plan, rank1.plan, ...");
  app.add_option("--ranks", options.ranks,
                 "Instead of --plans: start N ranks without plans, for piper-run "
                 "--profile-costs FILE (piper-launch --ranks 2 --profile-costs cpu.json)")
      ->check(CLI::PositiveNumber)
      ->excludes(plans_option);
  app.add_option("--piper-run", options.piper_run,
                 "The piper-run to start (default: the one next to piper-launch)");
  app.add_option("--grace", options.grace_s,
                 "Seconds the other ranks get to exit on their own after one fails, before "
                 "they are stopped")
      ->default_val(5)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--trace", options.trace_path,
                 "Trace the ranks (piper-run --trace, with --trace-steps): FILE holding %r gives "
                 "every rank its own file; otherwise piper-launch merges every rank's trace into "
                 "FILE, one Perfetto file on one clock (the system clock at each rank's first "
                 "traced step), a process per rank, with a flow arrow from each send to its recv");
  app.allow_extras();
  app.footer(
      "Forwarded to every piper-run (piper-run --help describes them): --steps N, --data DIR, "
      "--seed S, --metrics FILE, --save-onnx FILE, --trace-steps LIST, --timeout S, --device "
      "cpu|cuda, --comm gloo|nccl, --check-finite, --on-nonfinite stop|skip; %r in a path stands "
      "for the rank.");
  if (const auto exit_code = piper::tools::parse_command_line(app, argc, argv, "piper-launch")) {
    return *exit_code;
  }
  if (options.plans_dir.empty() && options.ranks == 0) {
    std::fprintf(stderr,
                 "piper-launch: error: --plans is required (or --ranks N) (piper-launch --help "
                 "lists the options)\n");
    return piper::tools::kUsageError;
  }
  options.run_args = app.remaining();
  try {
    return piper::engine::launch(options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "piper-launch: error: %s\n", error.what());
    return 1;
  }
}
