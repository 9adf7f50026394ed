#include "engine/runtime/run.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "engine/comm/launch_environment.h"
#include "engine/comm/rendezvous.h"
#include "engine/runtime/data.h"
#include "engine/runtime/progress.h"
#include "engine/runtime/session.h"
#include "engine/runtime/trace.h"
#include "formats/atomic_file.h"
#include "formats/build_info.h"
#include "formats/error.h"
#include "formats/lr_schedule.h"
#include "formats/onnx_model.h"
#include "formats/plan_file.h"

namespace piper::engine {
namespace {

// The most resident memory this process has held so far: its address space's high-water mark
// (VmHWM, KiB). Not getrusage's ru_maxrss: Linux carries that over an exec from the image
// before it, so a run started by a large parent (a forked Python test, a launcher) would
// report the parent's peak.
uint64_t peak_resident_bytes() {
  constexpr const char* kStatus = "/proc/self/status";
  std::ifstream status(kStatus);
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  throw Error(std::string("peak_rss_bytes: ") + kStatus +
              " has no VmHWM line (piper-run measures peak memory on Linux only)");
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// Metrics as JSON lines, each appended and flushed as its step ends, so that a run that fails
// later keeps the steps it finished. The file appears with the first finished step.
class MetricsFile {
 public:
  // A resumed run appends to the lines of the steps before its checkpoint.
  MetricsFile(std::string path, bool append) : path_(std::move(path)), append_(append) {}
  void write(const nlohmann::json& line) {
    if (!out_.is_open()) out_.open(path_, append_ ? std::ios::app : std::ios::trunc);
    out_ << line.dump() << '\n';
    out_.flush();
    if (!out_) throw Error("--metrics: cannot write '" + path_ + "': " + std::strerror(errno));
  }

 private:
  std::string path_;
  bool append_;
  std::ofstream out_;
};

std::string non_finite_name(double value) { return std::isnan(value) ? "NaN" : "infinite"; }

// "step 1 loss 2.302585 lr 0.001 grad_norm 0.4172 (0.012 s, 5333 samples/s)", the learning
// rate and the norm only when the plan trains (has a norm).
std::string step_line(int64_t step, double loss, double lr, std::optional<double> norm,
                      double seconds, double samples_per_s, bool skipped) {
  char line[240];
  int used = std::snprintf(line, sizeof line, "step %" PRId64 " loss %.6f", step, loss);
  if (norm) {
    used += std::snprintf(line + used, sizeof line - used, " lr %.6g grad_norm %.6g", lr, *norm);
  }
  std::snprintf(
      line + used, sizeof line - used, " (%.3f s, %.0f samples/s)%s", seconds, samples_per_s,
      skipped ? ": update skipped for the non-finite gradient norm (--on-nonfinite skip)" : "");
  return line;
}

// Fails before the first step when `path` could not be written once training ends.
void check_output_path(const std::string& flag, const std::string& path) {
  const std::filesystem::path target = std::filesystem::absolute(path);
  std::error_code error;
  if (std::filesystem::is_directory(target, error)) {
    throw Error(flag + " '" + path + "' is a folder; give the path of a file");
  }
  const std::filesystem::path folder = target.parent_path();
  if (!std::filesystem::is_directory(folder, error)) {
    throw Error(flag + " '" + path + "': its folder '" + folder.string() + "' does not exist");
  }
  if (::access(folder.c_str(), W_OK) != 0) {
    throw Error(flag + " '" + path + "': cannot write into '" + folder.string() +
                "': " + std::strerror(errno));
  }
}

// A per-rank output path: PATH with %r expanded, or PATH on rank 0 alone when it has no %r.
std::optional<std::string> rank_path(const std::optional<std::string>& path, int rank) {
  if (!path) return std::nullopt;
  if (has_rank_pattern(*path)) return expand_rank(*path, rank);
  if (rank != 0) return std::nullopt;
  return path;
}

void check_checkpoint_options(const CheckpointOptions& checkpoints) {
  if (checkpoints.directory.empty()) throw Error("--checkpoint-dir must name a folder");
  if (checkpoints.save_every < 0 || checkpoints.keep < 0) {
    throw Error("--save-every and --keep must be 0 or more");
  }
  std::error_code error;
  if (std::filesystem::exists(checkpoints.directory, error) &&
      !std::filesystem::is_directory(checkpoints.directory, error)) {
    throw Error("--checkpoint-dir '" + checkpoints.directory + "' is a file; give a folder");
  }
}

// A step's metrics line: tokens_per_s only for a plan with token inputs, mfu only with a peak,
// lr and grad_norm only for a plan that trains (has a norm): a key never stands for unknown.
nlohmann::json metrics_line(const Session& session, int64_t step, double loss, double seconds,
                            double samples_per_s, std::optional<double> peak_flops) {
  nlohmann::json line = {{"step", step},
                         {"loss", loss},
                         {"seconds", seconds},
                         {"samples_per_s", samples_per_s},
                         {"peak_bytes", session.peak_bytes()},
                         {"peak_rss_bytes", peak_resident_bytes()}};
  if (const std::optional<int64_t> tokens = tokens_per_sample(session.plan())) {
    line["tokens_per_s"] = samples_per_s * static_cast<double>(*tokens);
  }
  if (const auto mfu = model_flops_utilization(session.plan(), seconds, peak_flops)) {
    line["mfu"] = *mfu;
  }
  return line;
}

// The steps --trace records: --trace-steps, else the last; each must be one this run trains.
std::vector<int64_t> steps_to_trace(const RunOptions& options, int64_t first_step) {
  if (options.trace_steps.empty()) {
    if (options.steps == first_step) return {};
    return {options.steps};
  }
  for (int64_t step : options.trace_steps) {
    if (step <= first_step || step > options.steps) {
      throw Error("--trace-steps " + std::to_string(step) + ": this run trains steps " +
                  std::to_string(first_step + 1) + " to " + std::to_string(options.steps) +
                  (first_step > 0 ? " (resumed after step " + std::to_string(first_step) + ")"
                                  : std::string()) +
                  "; pick steps among them");
    }
  }
  return options.trace_steps;
}

// "5", "5, 10, 11, 12".
std::string step_numbers(const std::vector<TracedStep>& steps) {
  std::string text;
  for (const TracedStep& traced : steps) {
    text += (text.empty() ? "" : ", ") + std::to_string(traced.step);
  }
  return text;
}

void train(Session& session, BatchSource& source, const RunOptions& options,
           const std::string& plan_path, std::ostream& out, std::ostream& progress_out) {
  const int rank = static_cast<int>(session.plan().header().rank());
  const int64_t global_batch = session.plan().global_batch();
  const plan::MemorySummary& memory = session.planned_memory();
  out << "plan " << plan_path << ": rank " << rank << " of "
      << std::max<uint32_t>(session.plan().header().world_size(), 1) << ", "
      << session.num_streams() << " streams, " << session.num_kernels() << " kernels, global batch "
      << global_batch << "; device " << session.backend().name() << ", " << source.describe()
      << "\n";
  out << "memory: arena " << mib(memory.arena_bytes()) << " holding parameters "
      << mib(memory.parameter_bytes()) << ", gradients " << mib(memory.gradient_bytes())
      << ", optimizer state " << mib(memory.optimizer_bytes()) << ", activations at peak "
      << mib(memory.activation_bytes()) << ", inputs " << mib(memory.input_bytes());
  if (session.fusion_bytes() > 0) {
    out << "; collectives' fusion buffers " << mib(session.fusion_bytes());
  }
  out << "\n";

  const std::optional<std::string> metrics_path = rank_path(options.metrics_path, rank);
  const std::optional<std::string> save_onnx_path = rank_path(options.save_onnx_path, rank);
  const std::optional<std::string> trace_path = rank_path(options.trace_path, rank);
  for (const auto& [flag, path] : {std::pair{"--metrics", metrics_path},
                                   {"--save-onnx", save_onnx_path},
                                   {"--trace", trace_path}}) {
    if (path) check_output_path(flag, *path);
  }
  CheckpointSchedule checkpoints(session, options.checkpoints, options.steps, options.seed,
                                 source.describe(), source.token_stream());
  const int64_t first_step = checkpoints.resume(out);
  std::optional<MetricsFile> metrics;
  if (metrics_path) metrics.emplace(*metrics_path, first_step > 0);
  const std::vector<int64_t> trace_steps = steps_to_trace(options, first_step);
  std::vector<TracedStep> traced;
  int64_t skipped_steps = 0;
  ProgressLog progress(rank == 0 ? options.log_every : 0, options.steps, global_batch,
                       tokens_per_sample(session.plan()));
  for (int64_t step = first_step; step < options.steps; ++step) {
    // Only the traced steps read the clock.
    const bool tracing =
        trace_path && std::binary_search(trace_steps.begin(), trace_steps.end(), step + 1);
    if (trace_path) session.set_tracing(tracing);
    const Batch batch = source.batch(step);
    const auto start = std::chrono::steady_clock::now();
    const double loss = session.step(batch);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tracing) traced.push_back({step + 1, session.last_trace()});
    const double samples_per_s = seconds > 0 ? static_cast<double>(global_batch) / seconds : 0.0;
    const std::optional<double> norm = session.grad_norm();
    // The step just run (0-based) is the one the update kernels scheduled.
    const double lr = formats::scheduled_lr(session.plan().optimizer(), session.steps_done() - 1);
    const bool norm_finite = !norm || std::isfinite(*norm);
    // The norm is global, so every rank makes the same choice (the update kernels have left
    // the step out already).
    const bool skipped = !norm_finite && options.on_nonfinite == OnNonFinite::kSkip;
    skipped_steps += skipped;
    // Every rank holds the global loss and norm: rank 0 speaks for them.
    if (rank == 0) {
      out << step_line(step + 1, loss, lr, norm, seconds, samples_per_s, skipped) << std::endl;
    }
    progress.after_step(step + 1, loss, seconds, progress_out);
    if (metrics) {
      nlohmann::json line =
          metrics_line(session, step + 1, loss, seconds, samples_per_s, options.peak_flops);
      if (norm) {
        line["lr"] = lr;
        line["grad_norm"] = *norm;
        line["skipped"] = skipped;
        line["skipped_steps"] = skipped_steps;
      }
      metrics->write(line);
    }
    if (skipped || (norm_finite && std::isfinite(loss))) {
      checkpoints.after_step(step + 1, out);
      continue;
    }
    // Every rank holds the global loss and norm, so every rank stops here on its own.
    std::string what = "step " + std::to_string(step + 1) + ": the ";
    if (!std::isfinite(loss)) {
      what += "loss is " + non_finite_name(loss) + " on rank " + std::to_string(rank);
      if (!norm_finite) what += ", and the gradient norm " + non_finite_name(*norm);
    } else {
      what += "gradient norm is " + non_finite_name(*norm) + " on rank " + std::to_string(rank);
    }
    if (!norm_finite) {
      const std::string gradient = session.first_non_finite_gradient();
      what += gradient.empty() ? " (this rank's gradients are finite; another rank's are not)"
                               : " (the first non-finite gradient on this rank: " + gradient + ")";
    }
    throw NonFiniteError(
        what +
            "; training stopped and nothing was saved. piper-run --check-finite names the "
            "first kernel that writes a non-finite value (a learning rate too large, or "
            "NaN in the data, are the usual causes); --on-nonfinite skip leaves such steps' "
            "updates out instead",
        true);
  }
  if (skipped_steps > 0) {
    out << skipped_steps << " of " << options.steps
        << " steps skipped their update for a non-finite gradient norm\n";
  }
  if (options.save_onnx_path) {
    // Every rank takes part: sharded parameters are gathered from all of them.
    const auto trained = session.trained_parameters();
    if (save_onnx_path) {
      const std::string& model_path = session.plan().header().model_path();
      const onnx::ModelProto model = formats::load_onnx_model(model_path);
      formats::save_onnx_with_initializers(model, trained, formats::ExternalData(model, model_path),
                                           *save_onnx_path);
      out << "saved the trained model to " << *save_onnx_path << "\n";
    }
  }
  if (trace_path) {
    if (traced.empty()) {
      out << "no step ran: no trace written to " << *trace_path << "\n";
    } else {
      const nlohmann::json trace = chrome_trace(session.plan(), traced, session.backend().name());
      try {
        formats::write_file_atomically(*trace_path, trace.dump() + "\n");
      } catch (const std::exception& error) {
        throw Error(std::string("--trace: ") + error.what());
      }
      out << "wrote the trace of step" << (traced.size() > 1 ? "s " : " ") << step_numbers(traced)
          << " to " << *trace_path << "\n";
    }
  }
  if (metrics_path) out << "wrote metrics to " << *metrics_path << "\n";
}

}  // namespace

void run_training(const RunOptions& options, std::ostream& out, std::ostream& progress) {
  if (options.steps < 0) {
    throw Error("--steps must be at least 0, got " + std::to_string(options.steps));
  }
  if (options.log_every < 0) {
    throw Error("--log-every must be 0 (no progress lines) or more, got " +
                std::to_string(options.log_every));
  }
  if (options.peak_flops && !(*options.peak_flops > 0 && std::isfinite(*options.peak_flops))) {
    throw Error("--peak-flops must be the device's peak FLOP/s, more than 0 (e.g. 989e12), got " +
                std::to_string(*options.peak_flops));
  }
  if (!(options.timeout_s > 0)) {
    throw Error("--timeout must be more than 0 seconds, got " + std::to_string(options.timeout_s));
  }
  const std::string comm =
      options.comm.empty() ? default_communicator(options.device) : options.comm;
  if (comm != "gloo" && comm != "nccl") {
    throw Error("unknown --comm '" + comm + "'; available: gloo, nccl");
  }
  if (options.check_finite && options.device != "cpu") {
    throw Error(
        "--check-finite reads every kernel's outputs as it ends, which only --device "
        "cpu does; find the op on the CPU");
  }
  if (options.checkpoints) check_checkpoint_options(*options.checkpoints);
  if (comm == "nccl" && options.device != "cuda") {
    throw Error("--comm nccl works on GPU memory: it needs --device cuda, not --device " +
                options.device + " (use --comm gloo)");
  }
  const LaunchEnvironment launch = read_launch_environment(options.rendezvous.value_or(""));
  std::string plan_path = options.plan_path;
  if (has_rank_pattern(plan_path)) {
    if (!launch.rank) {
      throw Error("--plan '" + plan_path +
                  "' holds %r, but no launcher variable gives this process's rank (RANK, "
                  "OMPI_COMM_WORLD_RANK or SLURM_PROCID)");
    }
    plan_path = expand_rank(plan_path, *launch.rank);
  }
  plan::Plan plan = formats::read_plan_file(plan_path);
  if (plan.header().planner_version() != formats::piper_build_id() &&
      !options.allow_other_planner) {
    throw Error("plan '" + plan_path + "' was made by piper-plan " +
                plan.header().planner_version() + ", this piper-run is " +
                formats::piper_build_id() +
                "; re-plan with this build's piper-plan, or pass --allow-other-planner to run it "
                "anyway");
  }
  const int rank = static_cast<int>(plan.header().rank());
  const int world_size = std::max(static_cast<int>(plan.header().world_size()), 1);
  check_launch_against_plan(launch, rank, world_size, plan_path);
  std::unique_ptr<Rendezvous> rendezvous;
  if (world_size > 1) {
    if (!launch.rendezvous) {
      throw Error(plan_path + " is rank " + std::to_string(rank) + " of " +
                  std::to_string(world_size) +
                  ": the ranks need a rendezvous: --rendezvous tcp://HOST:PORT (rank 0 listens "
                  "there) or file:///shared/dir, or PIPER_RENDEZVOUS, or MASTER_ADDR and "
                  "MASTER_PORT");
    }
    RendezvousOptions meet;
    meet.url = *launch.rendezvous;
    meet.url_from = launch.rendezvous_from;
    meet.rank = rank;
    meet.world_size = world_size;
    meet.plan_id = plan.header().plan_id();
    meet.plan_path = plan_path;
    meet.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000));
    meet.token = launch.token;
    if (rank == 0) {
      const std::string warning =
          open_rendezvous_warning(parse_rendezvous_url(meet.url, meet.url_from), meet.token);
      if (!warning.empty()) std::cerr << "piper-run: warning: " << warning << std::endl;
    }
    rendezvous = std::make_unique<Rendezvous>(meet);
  }
  // Declared before the session, whose communicators it makes: it goes after them.
  std::unique_ptr<CommunicatorFactory> nccl;
  std::unique_ptr<Session> session;
  try {
    std::unique_ptr<BatchSource> source = make_batch_source(
        plan, {options.data_dir, options.tokens ? &*options.tokens : nullptr, options.seed});
    std::unique_ptr<Backend> backend = make_backend(options.device);
    SessionOptions session_options{options.seed, nullptr, options.check_finite};
    if (rendezvous && comm == "nccl") {
      nccl = make_nccl_communicators(
          *backend, rendezvous->store(), rank, "piper/" + plan.header().plan_id(),
          std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000)));
      session_options.communicators = nccl.get();
    } else if (rendezvous) {
      session_options.communicators = &rendezvous->communicators();
    }
    session = std::make_unique<Session>(std::move(plan), std::move(backend), session_options);
    train(*session, *source, options, plan_path, out, progress);
  } catch (const NonFiniteError& error) {
    if (rendezvous && !error.every_rank()) rendezvous->report_failure(error.what());
    throw;
  } catch (const Interrupted&) {
    throw;  // every rank stops at the same step
  } catch (const std::exception& error) {
    if (rendezvous) rendezvous->report_failure(error.what());
    throw;
  }
}

}  // namespace piper::engine
