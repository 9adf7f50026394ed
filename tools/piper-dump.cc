// piper-dump PLAN [--json]: prints a plan file readably (or as JSON).
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "formats/plan_file.h"
#include "formats/plan_text.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Prints a Piper plan (written by piper-plan): header, memory, inputs, "
      "parameters, optimizer, and every stream's instructions.",
      "piper-dump"};
  std::string path;
  bool json = false;
  app.add_option("plan", path, "plan file, e.g. plans/rank0.plan")->required();
  app.add_flag("--json", json, "print the plan as JSON (protobuf's JSON mapping) instead");
  CLI11_PARSE(app, argc, argv);

  try {
    const piper::plan::Plan plan = piper::formats::read_plan_file(path);
    std::cout << (json ? piper::formats::plan_to_json(plan) : piper::formats::plan_to_text(plan));
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
