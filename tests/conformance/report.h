// The conformance report: a per-op table of cases passed / run, a summary line, and the
// failures with their largest difference.
#pragma once

#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace piper::conformance {

enum class Outcome {
  kPassed,
  kFailed,
  kListed,         // in unsupported.txt: skipped
  kOpUnsupported,  // an op the backend does not run at all
};

struct CaseResult {
  std::string name;
  std::vector<std::string> ops;  // distinct op types the case dispatches to kernels, in order
  bool multi_node = false;
  Outcome outcome = Outcome::kPassed;
  double max_abs_diff = 0.0;         // largest |actual - expected| over the compared outputs
  std::string message;               // a failure's cause, a listed case's reason
  std::vector<std::string> missing;  // kOpUnsupported: the ops the backend lacks
};

class Report {
 public:
  void add(CaseResult result) { results_.push_back(std::move(result)); }
  // An error that is not one case's (a stale unsupported.txt entry).
  void add_error(std::string message) { errors_.push_back(std::move(message)); }

  // True when no case failed and there are no errors.
  bool ok() const;
  // Prints the table, the summary, the ops without kernels and the failures.
  void print(std::ostream& out, const std::string& backend, bool verbose) const;

 private:
  std::vector<CaseResult> results_;
  std::vector<std::string> errors_;
};

}  // namespace piper::conformance
