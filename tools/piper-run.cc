// piper-run: executes one rank's plan (written by piper-plan) for some training steps.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "engine/cpu/blas.h"
#include "engine/runtime/cost_profile.h"
#include "engine/runtime/run.h"
#include "engine/runtime/trace.h"
#include "formats/error.h"
#include "tools/command_line.h"

namespace {
// The exit code of a run stopped by a NaN or infinity, so that job scripts can tell it apart.
constexpr int kNonFiniteExit = 3;
// A run stopped by a signal after saving its checkpoint exits as shells report a signal's death.
constexpr int kSignalExitBase = 128;
}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS chooses its kernels as it loads and falls back to slow ones on CPUs newer than
  // itself; this restarts piper-run with OPENBLAS_CORETYPE naming the kernels the CPU supports.
  piper::engine::cpu::restart_with_openblas_core(argv);
  // Gloo's TCP pairs write without MSG_NOSIGNAL: when a peer rank dies, the next write would
  // kill this rank with SIGPIPE before it could report which peer went. Ignored, the write
  // fails with EPIPE and the step fails naming the peer.
  std::signal(SIGPIPE, SIG_IGN);
  piper::engine::RunOptions options;
  CLI::App app{
      "Executes a Piper plan: trains the planned model for some steps on this rank, printing "
      "one line per step (loss, step time, samples/s)."};
  auto* plan_option =
      app.add_option("--plan", options.plan_path,
                     "Plan file of this rank, written by piper-plan; %r stands for the rank the "
                     "launcher gives (RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID): "
                     "--plan plans/rank%r.plan. Required unless --profile-costs");
  piper::engine::CostProfileOptions profile;
  auto* profile_option = app.add_option(
      "--profile-costs", profile.path,
      "Instead of training, measure this machine for the cost model and write FILE, a "
      "cluster file for piper-plan --cluster (docs/cost-model.md): products by size and by "
      "shape, element-wise and other kernels by bytes (through --device), and, started as "
      "several ranks (piper-launch --ranks N, or a launcher with --rendezvous), collectives and "
      "transfers by size and group (through --comm), every rank timing its kernels at the same "
      "time and rank 0 again alone while the others idle. No plan is needed; rank 0 writes FILE. "
      "Takes minutes: on the 2-core development VMs about six for one rank, fourteen for two "
      "ranks");
  profile_option->type_name("FILE")->excludes(plan_option);
  app.add_flag("--profile-quick", profile.quick,
               "With --profile-costs: fewer and smaller sizes, briefly timed (a check that the "
               "mode works, seconds; not a profile to plan with)")
      ->needs(profile_option);
  app.add_option("--steps", options.steps,
                 "Training steps to run: the step the run ends at (with --resume, counted from "
                 "the start of training, not from the checkpoint)")
      ->default_val(10)
      ->check(CLI::Validator(
          [](std::string& value) {
            return !value.empty() && value[0] == '-' ? "must be 0 or more, got " + value
                                                     : std::string();
          },
          "N>=0"));
  app.add_option(
         "--data", options.data_dir,
         "Directory with NAME.npy per graph input (float32, int64 or bool, C order, leading "
         "dimension = samples), memory-mapped: each rank reads only its rows; step s uses "
         "rows (s*G + i) mod samples of each, G the global batch. Without it (and --tokens), "
         "synthetic data from --seed: floats standard normal, "
         "int64 inputs uniform in [0, int_high) of the plan's batch input (0 where it gives "
         "none), bools true or false with equal chance")
      ->check(CLI::ExistingDirectory);
  std::string token_file, token_dtype = "uint16", token_inputs;
  auto* tokens_option = app.add_option(
      "--tokens", token_file,
      "Token file: a flat array of uint16 or uint32 token ids (nanoGPT's train.bin), "
      "memory-mapped. Sample g of the stream (step s, row i: g = s*G + i) gets, for each input "
      "NAME=OFFSET of --token-inputs, the window of the model's sequence length starting "
      "OFFSET tokens after a position drawn from --seed and g alone (the same in every layout "
      "and after --resume); each rank reads only its rows. Inputs it does not name come from "
      "--data");
  app.add_option("--token-dtype", token_dtype, "The ids' type in --tokens: uint16 or uint32")
      ->default_val("uint16")
      ->needs(tokens_option)
      ->check(CLI::IsMember({"uint16", "uint32"}));
  app.add_option("--token-inputs", token_inputs,
                 "The model inputs --tokens feeds, NAME=OFFSET,...: idx=0,tgt=1 for a model "
                 "that takes shifted targets, input_ids=0,labels=0 for HuggingFace models "
                 "(which shift the labels themselves)")
      ->needs(tokens_option);
  tokens_option->needs("--token-inputs");
  app.add_option("--metrics", options.metrics_path,
                 "Write per-step metrics as JSON lines (step, loss, seconds, samples_per_s, "
                 "peak_bytes, peak_rss_bytes; lr and grad_norm when the plan trains; "
                 "tokens_per_s when it has token inputs; mfu with --peak-flops) to this file, a "
                 "line appended and flushed as each step ends (a failed run keeps the steps it "
                 "finished). Of several ranks only rank 0 writes it, unless the path holds %r");
  app.add_option("--log-every", options.log_every,
                 "Rank 0 prints a progress line to stderr every N steps and after the last "
                 "(\"step 40/1000  loss 2.3456  12.3k tok/s  ETA 3m12s\"); 0: none. Rank 0 "
                 "prints each step's line to stdout too; the other ranks print neither")
      ->default_val(10)
      ->check(CLI::NonNegativeNumber);
  app.add_option(
         "--peak-flops", options.peak_flops,
         "The device's peak FLOP/s in the plan's precision (e.g. 989e12, an H100's dense "
         "bfloat16): the metrics' mfu is the plan's FLOPs of this rank per step (the "
         "cost model's: planned_step.flops in piper-dump --json) over the step's time and this "
         "peak")
      ->check(CLI::PositiveNumber);
  app.add_option("--save-onnx", options.save_onnx_path,
                 "After training, write the model (the plan's header.model_path) with the trained "
                 "weights to this ONNX file (atomically); rank 0 alone unless the path holds %r");
  app.add_option("--trace", options.trace_path,
                 "Write a Chrome/Perfetto trace (JSON; open in ui.perfetto.dev or "
                 "chrome://tracing) of the last step: a row per stream, one event per task "
                 "(\"F mb3\", transfers by label) with its kernels inside, in microseconds from "
                 "the step's start; compare with piper-dump --schedule PLANDIR. Times are the "
                 "host's: with --device cuda, when kernels were issued, not when they ran. "
                 "Written atomically at the end; rank 0 alone unless the path holds %r");
  std::string trace_steps;
  app.add_option("--trace-steps", trace_steps,
                 "The steps --trace records, e.g. 5,10-12 (1-based, as printed; default: the "
                 "last), in one file on one clock; each must be a step this run trains")
      ->needs("--trace");
  app.add_option("--rendezvous", options.rendezvous,
                 "Where the ranks of a multi-rank plan meet: tcp://HOST:PORT (rank 0 listens "
                 "there) or file:///shared/dir. Default: PIPER_RENDEZVOUS, else "
                 "tcp://MASTER_ADDR:MASTER_PORT. Plans of one rank need none. A tcp:// store "
                 "admits only connections that prove they hold the job's secret, "
                 "PIPER_RENDEZVOUS_TOKEN (the same on every rank, e.g. export "
                 "PIPER_RENDEZVOUS_TOKEN=$(openssl rand -hex 32)); without it anyone who reaches "
                 "the port gets in, and rank 0 warns when it listens on an address other hosts "
                 "reach");
  app.add_option("--timeout", options.timeout_s,
                 "Seconds a rank waits for the others (to start, and in every collective or "
                 "transfer) before it fails, naming the ranks that did not come")
      ->default_val(300)
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", options.seed,
                 "Seed of synthetic data, of --tokens windows and of seeded kernels")
      ->default_val(0);
  app.add_option("--device", options.device,
                 "Compute device: cpu, or cuda (this process's GPU: the launcher's local rank "
                 "modulo the GPUs it sees)")
      ->default_val("cpu")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--comm", options.comm,
                 "Communicators between ranks: gloo (TCP, host memory; with cuda it stages "
                 "through host memory, so that ranks can share a GPU) or nccl (GPU memory, "
                 "--device cuda). Default: gloo for cpu, nccl for cuda")
      ->check(CLI::IsMember({"gloo", "nccl"}));
  app.add_flag("--check-finite", options.check_finite,
               "Scan every kernel's float outputs as it ends and stop at the first NaN or "
               "infinity, naming the kernel and tensor (slower; --device cpu). Without it a "
               "non-finite loss or gradient norm stops the run at that step, naming the first "
               "non-finite gradient. Either exits 3, saving nothing");
  std::string on_nonfinite = "stop";
  app.add_option("--on-nonfinite", on_nonfinite,
                 "A step whose global gradient norm is NaN or infinite: stop (exit 3 on every "
                 "rank, saving nothing) or skip (leave its update out on every rank, as AMP's "
                 "GradScaler does, and train on; the metrics count skipped steps)")
      ->default_val("stop")
      ->check(CLI::IsMember({"stop", "skip"}));
  std::string checkpoint_dir;
  piper::engine::CheckpointOptions checkpoints;
  auto* checkpoint_option = app.add_option(
      "--checkpoint-dir", checkpoint_dir,
      "Save sharded checkpoints into this folder, which every rank must see (a shared file "
      "system for several hosts): a step folder DIR/step-NNNNNN per save, in which every rank "
      "writes the parameters and optimizer state it owns (rank-NNNNN.safetensors) and rank 0 "
      "index.json, committed by an atomic rename once every rank has written. Saves after the "
      "last step, every --save-every steps, and at the next step boundary after SIGTERM or "
      "SIGINT (Ctrl-C), after which piper-run exits 128 + the signal (143, 130)");
  app.add_option("--save-every", checkpoints.save_every,
                 "Also save a checkpoint every N steps (0: only after the last step and on a "
                 "signal)")
      ->needs(checkpoint_option)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep", checkpoints.keep,
                 "Keep only the newest K committed checkpoints, removing older step folders "
                 "(0: keep all)")
      ->needs(checkpoint_option)
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", checkpoints.resume,
               "Continue from the latest committed step in --checkpoint-dir (its parameters, "
               "optimizer state, step and data position; a missing or empty folder starts at "
               "step 0). The checkpoint's shards are verified against their checksums and must "
               "match the plan's tensors")
      ->needs(checkpoint_option);
  app.add_flag("--allow-other-planner", options.allow_other_planner,
               "Run a plan made by another build of piper-plan (plans record the planner's "
               "build id; see --version)");
  if (const auto exit_code = piper::tools::parse_command_line(app, argc, argv, "piper-run")) {
    return *exit_code;
  }
  if (!profile.path.empty()) {
    profile.device = options.device;
    profile.comm = options.comm;
    profile.rendezvous = options.rendezvous;
    profile.timeout_s = options.timeout_s;
    try {
      piper::engine::profile_costs(profile, std::cout);
    } catch (const std::exception& error) {
      std::cout.flush();
      std::fprintf(stderr, "piper-run: error: %s\n", error.what());
      return 1;
    }
    return 0;
  }
  if (options.plan_path.empty()) {
    std::fprintf(stderr,
                 "piper-run: error: --plan is required (or --profile-costs FILE) (piper-run "
                 "--help lists the options)\n");
    return piper::tools::kUsageError;
  }
  if (!checkpoint_dir.empty()) {
    checkpoints.directory = checkpoint_dir;
    options.checkpoints = checkpoints;
  }
  try {
    if (!token_file.empty()) {
      options.tokens =
          piper::engine::TokenOptions{token_file, piper::engine::parse_token_dtype(token_dtype),
                                      piper::engine::parse_token_inputs(token_inputs)};
    }
    if (!trace_steps.empty()) options.trace_steps = piper::engine::parse_step_list(trace_steps);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "piper-run: error: %s\n", error.what());
    return 1;
  }
  options.on_nonfinite = on_nonfinite == "skip" ? piper::engine::OnNonFinite::kSkip
                                                : piper::engine::OnNonFinite::kStop;
  try {
    piper::engine::run_training(options, std::cout);
  } catch (const piper::engine::Interrupted& stopped) {
    std::cout.flush();
    std::fprintf(stderr, "piper-run: %s\n", stopped.what());
    return kSignalExitBase + stopped.signal();
  } catch (const piper::NonFiniteError& error) {
    std::cout.flush();
    std::fprintf(stderr, "piper-run: error: %s\n", error.what());
    return kNonFiniteExit;
  } catch (const std::exception& error) {
    std::cout.flush();
    std::fprintf(stderr, "piper-run: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
