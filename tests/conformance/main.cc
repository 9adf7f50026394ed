// piper_conformance: runs the ONNX backend node tests (libonnx-testdata) through Piper's CPU
// kernels (or another backend's, --device) and compares with the expected outputs. Exits 0 when
// every case that runs passes and unsupported.txt is exact, 1 on a failure, 2 on a usage or setup
// error, 77 (ctest's skip code) when the test data is not installed.
#include <fnmatch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>

#include "engine/cpu/cpu_backend.h"
#include "formats/error.h"
#include "tests/conformance/compare.h"
#include "tests/conformance/node_runner.h"
#include "tests/conformance/report.h"
#include "tests/conformance/test_case.h"
#include "tests/conformance/unsupported_list.h"

namespace piper::conformance {
namespace {

struct Options {
  std::string data_dir = "/usr/share/libonnx-testdata/data/node";
  std::string unsupported = PIPER_CONFORMANCE_UNSUPPORTED;
  std::string filter = "*";
  bool verbose = false;
  bool stale_check = true;
  std::string device = "cpu";
  Tolerance tolerance;
};

// Runs every data set and compares every output; an empty string when all match.
// `max_abs_diff` gets the largest difference seen.
std::string run_and_compare(engine::Backend& backend, const TestCase& test,
                            const Tolerance& tolerance, double& max_abs_diff) {
  const auto& graph = test.model.graph();
  for (const auto& data : test.data_sets) {
    std::vector<HostTensor> outputs;
    try {
      outputs = run_data_set(backend, test, data);
    } catch (const std::exception& error) {
      return data.name + ": " + error.what();
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Comparison c = compare(outputs[i], data.outputs[i], tolerance);
      max_abs_diff = std::max(max_abs_diff, c.max_abs_diff);
      if (!c.ok) {
        return data.name + " output " + std::to_string(i) + " '" + graph.output(i).name() +
               "': " + c.detail;
      }
    }
  }
  return "";
}

// Why the runner cannot express this case in a plan: the loader's reason or a node's.
std::string case_problem(const TestCase& test) {
  if (!test.unsupported.empty()) return test.unsupported;
  for (const auto& node : test.model.graph().node()) {
    if (std::string problem = node_problem(node); !problem.empty()) {
      return node.op_type() + ": " + problem;
    }
  }
  return "";
}

CaseResult run_case(engine::Backend& backend, const std::set<std::string>& supported,
                    const std::string& dir, UnsupportedList& list, const Options& options) {
  CaseResult result;
  result.name = std::filesystem::path(dir).filename().string();
  const UnsupportedEntry* entry = list.match(result.name);
  TestCase test;
  try {
    test = load_test_case(dir);
  } catch (const std::exception& error) {
    result.outcome = Outcome::kFailed;
    result.message = std::string("cannot load: ") + error.what();
    return result;
  }
  const auto& nodes = test.model.graph().node();
  result.multi_node = nodes.size() > 1;
  for (const auto& node : nodes) {
    const std::string& op = node.op_type();
    if (folded_on_host(node, test.model.graph())) continue;
    if (std::find(result.ops.begin(), result.ops.end(), op) == result.ops.end()) {
      result.ops.push_back(op);
    }
    if (!supported.count(op) &&
        std::find(result.missing.begin(), result.missing.end(), op) == result.missing.end()) {
      result.missing.push_back(op);
    }
  }
  if (!result.missing.empty()) {
    result.outcome = Outcome::kOpUnsupported;
    return result;
  }
  const std::string problem = case_problem(test);
  if (entry != nullptr) {
    result.outcome = Outcome::kListed;
    result.message = entry->reason;
    // A listed case Piper could run and that passes makes the list dishonest.
    double ignored = 0.0;
    if (options.stale_check && problem.empty() &&
        run_and_compare(backend, test, options.tolerance, ignored).empty()) {
      result.outcome = Outcome::kFailed;
      result.message = "passes but is listed as unsupported (" + list.origin() + ":" +
                       std::to_string(entry->line) + " '" + entry->pattern +
                       "'); remove or narrow that entry";
    }
    return result;
  }
  if (!problem.empty()) {
    result.outcome = Outcome::kFailed;
    result.message = "not supported (" + problem + ") and not listed in " + list.origin();
    return result;
  }
  result.message = run_and_compare(backend, test, options.tolerance, result.max_abs_diff);
  result.outcome = result.message.empty() ? Outcome::kPassed : Outcome::kFailed;
  return result;
}

int run(const Options& options) {
  if (!std::filesystem::is_directory(options.data_dir)) {
    std::cerr << "piper_conformance: no ONNX node tests at '" << options.data_dir
              << "'; install the Debian package libonnx-testdata (skipped)\n";
    return 77;
  }
  UnsupportedList list = UnsupportedList::load(options.unsupported);
  // Every backend runs the CPU backend's ops (the cuda one some of them on the host).
  const auto ops = engine::cpu::CpuBackend().supported_ops();
  const std::set<std::string> supported(ops.begin(), ops.end());
  const std::unique_ptr<engine::Backend> backend = engine::make_backend(options.device);
  Report report;
  for (const auto& dir : list_test_cases(options.data_dir)) {
    const std::string name = std::filesystem::path(dir).filename().string();
    if (fnmatch(options.filter.c_str(), name.c_str(), 0) != 0) continue;
    report.add(run_case(*backend, supported, dir, list, options));
  }
  if (options.filter == "*") {
    for (const UnsupportedEntry* stale : list.unused()) {
      report.add_error(list.origin() + ":" + std::to_string(stale->line) + ": '" + stale->pattern +
                       "' matches no case (or only cases an earlier entry " +
                       "matches); remove it");
    }
  }
  report.print(std::cout, backend->name(), options.verbose);
  return report.ok() ? 0 : 1;
}

}  // namespace
}  // namespace piper::conformance

int main(int argc, char** argv) {
  piper::conformance::Options options;
  CLI::App app{"Runs the ONNX backend node tests through Piper's CPU kernels."};
  app.add_option("--data", options.data_dir, "directory of ONNX node test cases")
      ->capture_default_str();
  app.add_option("--unsupported", options.unsupported, "list of cases deliberately not run")
      ->capture_default_str();
  app.add_option("--filter", options.filter, "run only cases matching this glob")
      ->capture_default_str();
  app.add_option("--rtol", options.tolerance.rtol, "float32 relative tolerance")
      ->capture_default_str();
  app.add_option("--atol", options.tolerance.atol, "float32 absolute tolerance")
      ->capture_default_str();
  app.add_flag("--verbose,-v", options.verbose, "print every case's outcome");
  app.add_option("--device", options.device, "backend to run the cases on: cpu or cuda")
      ->capture_default_str();
  app.add_flag("!--no-stale-check", options.stale_check,
               "do not run listed cases to check that they still fail");
  CLI11_PARSE(app, argc, argv);
  try {
    return piper::conformance::run(options);
  } catch (const std::exception& error) {
    std::cerr << "piper_conformance: " << error.what() << "\n";
    return 2;
  }
}
