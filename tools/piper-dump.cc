// piper-dump PLAN [--json | --comm]: prints a plan file readably (or as JSON, or
// its communication per step).
// piper-dump --schedule DIR [-o schedule.svg]: draws the planned step of a
// plan directory, as text or SVG.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "formats/atomic_file.h"
#include "formats/comm_volume.h"
#include "formats/error.h"
#include "formats/plan_file.h"
#include "formats/plan_text.h"
#include "formats/schedule_view.h"
#include "tools/command_line.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Prints a Piper plan (written by piper-plan): header, memory, inputs, "
      "parameters, optimizer, and every stream's instructions. With --schedule, draws the "
      "step piper-plan's cost model planned for every rank of a plan directory instead."};
  std::string path, schedule_dir, output;
  bool json = false;
  bool comm = false;
  int width = 100;
  app.add_option("plan", path, "plan file, e.g. plans/rank0.plan");
  app.add_flag("--json", json, "print the plan as JSON (protobuf's JSON mapping) instead");
  app.add_flag("--comm", comm,
               "print only the bytes the plan's rank communicates per step, by kind: "
               "tensor/expert-parallel reshards inside compute tasks, data-parallel collective "
               "tasks, sends and recvs (volume as docs/cost-model.md defines it)")
      ->excludes("--json");
  auto* schedule =
      app.add_option(
             "--schedule", schedule_dir,
             "draw the planned step of every DIR/rank<N>.plan: one row per rank and stream, tasks "
             "labelled by pass and microbatch (F3, B0, BI/BW, U) or comm kind (S/R send/recv, AR "
             "all-reduce, RS reduce-scatter, AG all-gather, A2A all-to-all; tensor-parallel ones "
             "over the compute task they run in), idle time as gaps; as text unless -o")
          ->type_name("DIR");
  app.add_option("-o,--output", output,
                 "with --schedule: write the picture as SVG to this file (atomically)")
      ->type_name("FILE")
      ->needs(schedule);
  app.add_option("--width", width, "with --schedule and no -o: characters for the step")
      ->default_val(width)
      ->check(CLI::Range(10, 10000))
      ->needs(schedule);
  schedule->excludes("--json")->excludes("--comm");
  if (const auto exit_code = piper::tools::parse_command_line(app, argc, argv, "piper-dump")) {
    return *exit_code;
  }

  try {
    if (!schedule_dir.empty() && !path.empty()) {
      throw piper::Error("give a plan file or --schedule DIR, not both");
    }
    if (!schedule_dir.empty()) {
      const auto plans = piper::formats::read_plan_directory(schedule_dir);
      if (!output.empty()) {
        piper::formats::write_file_atomically(output, piper::formats::schedule_svg(plans));
        std::cout << "wrote the planned step of " << plans.size() << " rank(s) to " << output
                  << "\n";
      } else {
        std::cout << piper::formats::schedule_text(plans, width);
      }
    } else {
      if (path.empty()) throw piper::Error("no plan: give a plan file or --schedule DIR");
      const piper::plan::Plan plan = piper::formats::read_plan_file(path);
      if (comm) {
        std::cout << piper::formats::comm_volume_table(piper::formats::comm_volume(plan));
      } else {
        std::cout << (json ? piper::formats::plan_to_json(plan)
                           : piper::formats::plan_to_text(plan));
      }
    }
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "piper-dump: error: cannot write to standard output\n";
      return 1;
    }
  } catch (const std::exception& error) {
    std::cerr << "piper-dump: error: " << error.what() << '\n';
    return 1;
  }
  return 0;
}
