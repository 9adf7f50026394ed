// piper-plan MODEL.onnx STRATEGY.json -o DIR: plans training and writes one
// plan per rank.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "formats/cluster.h"
#include "formats/comm_volume.h"
#include "formats/error.h"
#include "formats/onnx_model.h"
#include "formats/plan_directory.h"
#include "formats/strategy.h"
#include "planner/import/model_listing.h"
#include "planner/plan_model.h"
#include "tools/command_line.h"

namespace {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit ? "%.1f %s" : "%.0f %s", value, units[unit]);
  return text;
}

std::string human_seconds(double seconds) {
  char text[32];
  if (seconds < 1e-3) {
    std::snprintf(text, sizeof(text), "%.1f us", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(text, sizeof(text), "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.3f s", seconds);
  }
  return text;
}

// "frozen '*mask*': 2 initializers (blocks.0.attn.mask, blocks.1.attn.mask)", the first few.
void print_frozen(const piper::planner::FrozenMatch& match) {
  constexpr size_t kShown = 4;
  const auto& names = match.initializers;
  std::cout << "  frozen '" << match.glob << "': " << names.size() << " initializer"
            << (names.size() == 1 ? "" : "s") << " (";
  for (size_t i = 0; i < std::min(names.size(), kShown); ++i) {
    std::cout << (i ? ", " : "") << names[i];
  }
  std::cout << (names.size() > kShown ? ", ...)\n" : ")\n");
}

// ", arena 1.1 MiB of the device's 80 GB": whether the rank fits the described device.
std::string device_memory(const piper::plan::MemorySummary& memory,
                          const piper::planner::sim::DeviceRates& rates) {
  if (!(rates.memory_bytes > 0)) return "";
  char capacity[32];
  std::snprintf(capacity, sizeof(capacity), "%g GB", rates.memory_bytes / 1e9);
  const bool fits = static_cast<double>(memory.arena_bytes()) <= rates.memory_bytes;
  return ", arena " + human_bytes(memory.arena_bytes()) + (fits ? " of" : " exceeds") +
         " the device's " + capacity;
}

// The rates: the cluster file's when given, each rate flag given overriding its part.
piper::planner::sim::DeviceRates cost_rates(const CLI::App& app, const std::string& cluster_path,
                                            const piper::planner::sim::DeviceRates& flags) {
  if (cluster_path.empty()) return flags;
  piper::planner::sim::DeviceRates rates = piper::formats::load_cluster(cluster_path);
  if (app.count("--flops")) rates.flops = rates.bfloat16_flops = flags.flops;
  if (app.count("--memory-bandwidth")) rates.memory_bandwidth = flags.memory_bandwidth;
  if (app.count("--link-bandwidth")) {
    rates.intra_node.bandwidth = rates.inter_node.bandwidth = flags.intra_node.bandwidth;
  }
  if (app.count("--link-latency")) {
    rates.intra_node.latency = rates.inter_node.latency = flags.intra_node.latency;
  }
  if (app.count("--op-overhead")) rates.op_overhead = flags.op_overhead;
  return rates;
}

// The lines piper-plan prints for one rank's plan: instructions and memory, planned step,
// communication.
std::string rank_summary(const piper::plan::Plan& plan,
                         const piper::planner::sim::DeviceRates& rates) {
  std::ostringstream out;
  const auto& memory = plan.memory();
  size_t instructions = 0;
  for (const auto& stream : plan.streams()) instructions += stream.instructions_size();
  out << "  rank " << plan.header().rank() << ": " << instructions << " instructions, arena "
      << human_bytes(memory.arena_bytes()) << " (parameters "
      << human_bytes(memory.parameter_bytes()) << ", gradients "
      << human_bytes(memory.gradient_bytes()) << ", optimizer "
      << human_bytes(memory.optimizer_bytes()) << ", activations peak "
      << human_bytes(memory.activation_bytes()) << ")\n";
  const auto& step = plan.planned_step();
  char bubble[32];
  std::snprintf(bubble, sizeof(bubble), "%.1f%%", step.bubble_fraction() * 100);
  out << "  rank " << plan.header().rank() << ": planned step " << human_seconds(step.step_s())
      << ", compute busy " << human_seconds(step.busy_s()) << ", bubble " << bubble
      << ", peak activations " << human_bytes(memory.activation_bytes())
      << device_memory(memory, rates) << "\n";
  out << "  rank " << plan.header().rank() << ": communication per step: "
      << piper::formats::comm_volume_line(piper::formats::comm_volume(plan)) << "\n";
  return out.str();
}

void print_summary(const piper::planner::PlanningResult& result,
                   const std::vector<std::string>& ranks, const std::string& dir,
                   const piper::planner::sim::DeviceRates& rates) {
  std::cout << "planned " << ranks.size() << " rank(s), " << result.num_ops << " ops in "
            << result.num_tasks << " tasks -> " << dir << "\n";
  if (result.ranks->specialised() > 0) {
    std::cout << "  symmetric ranks: " << result.ranks->lowered() << " plan(s) lowered, "
              << result.ranks->specialised() << " specialised from another rank's\n";
  }
  if (!result.fusions.empty()) {
    std::cout << "  fused:";
    for (const auto& [rule, count] : result.fusions) std::cout << " " << rule << " " << count;
    std::cout << "\n";
  }
  for (const auto& match : result.frozen) print_frozen(match);
  if (result.bf16_casts > 0) {
    std::cout << "  precision bf16: " << result.bf16_casts
              << " casts (matrix products in bfloat16; normalization, softmax, losses and "
                 "reductions in float32; float32 master weights)\n";
  }
  for (const std::string& lines : ranks) std::cout << lines;
  std::cout << "  cost model: " << rates.describe()
            << " (--cluster FILE, --flops, --memory-bandwidth, --link-bandwidth, --link-latency,"
               " --op-overhead; piper-dump --schedule DIR draws the planned step)\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Plans the training of an ONNX model under a strategy and writes one plan per rank "
      "(DIR/rank{r}.plan) for piper-run."};
  std::string model_path, strategy_path, output_dir;
  bool expand = false;
  bool no_fuse = false;
  bool no_verify = false;
  bool force = false;
  bool list = false;
  app.add_option("model", model_path, "ONNX model exported with its loss as the first output")
      ->required();
  app.add_option("strategy", strategy_path,
                 "strategy JSON file (docs/strategy.md); required unless --list");
  app.add_flag("--list", list,
               "print every node (name, op type) and initializer (name, shape, dtype) of MODEL: "
               "the names \"annotations\" and \"frozen\" globs match; then exit (no strategy "
               "needed)");
  app.add_option("-o,--output", output_dir,
                 "folder for the plans: a new one appears whole or not at all; an existing one "
                 "must hold only plans (rank<N>.plan), which are replaced, or take --force");
  app.add_flag("--force", force,
               "write into an -o folder that holds other files too, replacing only its "
               "rank<N>.plan files");
  app.add_flag("--expand", expand,
               "print the strategy with every default and generator expanded (and \"stages\": "
               "\"auto\" resolved into annotations), as JSON, and exit");
  app.add_flag("--no-fuse", no_fuse,
               "train the model's ops as exported: do not rewrite attention, LayerNorm and GELU "
               "patterns into fused ops");
  app.add_flag("--no-verify", no_verify,
               "verify the task DAG once, before lowering it, instead of after every directive "
               "as well, which skips a full pass over the DAG per directive; the plans are the "
               "same, but an error then names no directive");
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--threads", threads,
                 "threads that lower and write the ranks' plans at once (default: the machine's "
                 "hardware threads); the plans are the same for any number")
      ->check(CLI::PositiveNumber);
  piper::planner::PlanningOptions options;
  piper::planner::sim::DeviceRates rates;
  std::string cluster_path;
  app.add_option("--cluster", cluster_path,
                 "cost model: a JSON description of the cluster to plan for (devices per node, "
                 "FLOP/s per dtype, memory, intra- and inter-node bandwidth and latency, "
                 "per-kernel overhead, and the kernels and collectives piper-run --profile-costs "
                 "measured; docs/cost-model.md) instead of the rate flags' defaults; "
                 "a rate flag given as well overrides its part of the file")
      ->type_name("FILE");
  app.add_option("--flops", rates.flops,
                 "cost model: FLOP/s one device's kernels reach in every dtype, e.g. 100e9 (for "
                 "the planned step time and bubbles piper-plan reports and piper-dump --schedule "
                 "draws)")
      ->default_val(rates.flops)
      ->check(CLI::PositiveNumber);
  app.add_option("--memory-bandwidth", rates.memory_bandwidth,
                 "cost model: bytes/s a kernel reads plus writes; a kernel takes the longer of "
                 "its FLOPs and its bytes over these rates")
      ->default_val(rates.memory_bandwidth)
      ->check(CLI::PositiveNumber);
  app.add_option("--link-bandwidth", rates.intra_node.bandwidth,
                 "cost model: bytes/s between two devices (transfers and collectives), within "
                 "and across nodes")
      ->default_val(rates.intra_node.bandwidth)
      ->check(CLI::PositiveNumber);
  app.add_option("--link-latency", rates.intra_node.latency,
                 "cost model: seconds each transfer or collective adds, within and across nodes")
      ->default_val(rates.intra_node.latency)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--op-overhead", rates.op_overhead,
                 "cost model: seconds each kernel adds (dispatch, launch)")
      ->default_val(rates.op_overhead)
      ->check(CLI::NonNegativeNumber);
  if (const auto exit_code = piper::tools::parse_command_line(app, argc, argv, "piper-plan")) {
    return *exit_code;
  }
  try {
    if (list) {
      std::cout << piper::planner::list_model(piper::formats::load_onnx_model(model_path),
                                              model_path);
      return 0;
    }
    if (strategy_path.empty()) throw piper::Error("no strategy: pass STRATEGY.json (or --list)");
    const piper::strategy::Strategy strategy = piper::strategy::load_strategy(strategy_path);
    if (expand) {
      std::cout
          << piper::strategy::to_json(piper::planner::expand_strategy(model_path, strategy)).dump(2)
          << "\n";
      return 0;
    }
    if (output_dir.empty()) throw piper::Error("no output directory: pass -o DIR");
    options.fuse = !no_fuse;
    options.verify = !no_verify;
    rates.inter_node = rates.intra_node;
    options.rates = cost_rates(app, cluster_path, rates);
    // Each rank's plan is lowered, summarised and written in turn (by --threads threads at
    // once), never all held at once.
    const auto result = piper::planner::plan_ranks(model_path, strategy, options);
    std::vector<std::string> ranks(static_cast<size_t>(result.ranks->num_ranks()));
    // Symmetric ranks are taken one after another, so that each thread lowers a class once
    // and specialises that plan for the class's other ranks.
    piper::formats::write_plan_directory(
        result.ranks->order(),
        [&]() -> piper::formats::PlanSource {
          return [&, plan_of = result.ranks->source()](int rank) -> const piper::plan::Plan& {
            const piper::plan::Plan& plan = plan_of(rank);
            ranks[static_cast<size_t>(rank)] = rank_summary(plan, options.rates);
            return plan;
          };
        },
        output_dir, force, threads);
    print_summary(result, ranks, output_dir, options.rates);
  } catch (const std::exception& error) {
    std::cerr << "piper-plan: error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
