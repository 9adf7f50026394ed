#include "tests/conformance/report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace piper::conformance {
namespace {

struct OpCounts {
  int passed = 0;
  int run = 0;
  int listed = 0;
  int multi_passed = 0;
  int multi_run = 0;
  double max_abs_diff = 0.0;  // over the cases that passed
};

std::string ratio(int passed, int run) {
  return run == 0 ? "-" : std::to_string(passed) + "/" + std::to_string(run);
}

// Words joined by spaces, wrapped at `width` columns with `indent` spaces.
void print_wrapped(std::ostream& out, const std::vector<std::string>& words, size_t width,
                   size_t indent) {
  size_t column = indent;
  out << std::string(indent, ' ');
  for (const auto& word : words) {
    if (column > indent && column + 1 + word.size() > width) {
      out << "\n" << std::string(indent, ' ');
      column = indent;
    }
    if (column > indent) {
      out << ' ';
      ++column;
    }
    out << word;
    column += word.size();
  }
  out << "\n";
}

// One table row: the op left-aligned, the counts right-aligned.
void print_row(std::ostream& out, const std::string& op, const std::string& passed,
               const std::string& listed, const std::string& multi, const std::string& diff) {
  out << std::left << std::setw(28) << op << std::right << std::setw(12) << passed << std::setw(10)
      << listed << std::setw(22) << multi << std::setw(14) << diff << "\n";
}

}  // namespace

bool Report::ok() const {
  return errors_.empty() && std::none_of(results_.begin(), results_.end(), [](const auto& r) {
           return r.outcome == Outcome::kFailed;
         });
}

void Report::print(std::ostream& out, const std::string& backend, bool verbose) const {
  std::map<std::string, OpCounts> ops;
  std::map<std::string, int> missing;
  int passed = 0, failed = 0, listed = 0, unsupported = 0, multi = 0;
  for (const auto& r : results_) {
    switch (r.outcome) {
      case Outcome::kPassed:
      case Outcome::kFailed: {
        const bool ok = r.outcome == Outcome::kPassed;
        (ok ? passed : failed) += 1;
        multi += r.multi_node ? 1 : 0;
        for (const auto& op : r.ops) {
          OpCounts& c = ops[op];
          (r.multi_node ? c.multi_run : c.run) += 1;
          (r.multi_node ? c.multi_passed : c.passed) += ok ? 1 : 0;
          if (ok) c.max_abs_diff = std::max(c.max_abs_diff, r.max_abs_diff);
        }
        break;
      }
      case Outcome::kListed:
        ++listed;
        for (const auto& op : r.ops) ops[op].listed += 1;
        break;
      case Outcome::kOpUnsupported:
        ++unsupported;
        for (const auto& op : r.missing) missing[op] += 1;
        break;
    }
  }

  out << "ONNX backend node tests on the " << backend << " backend\n\n";
  const std::string rule(86, '-');
  print_row(out, "op", "passed/run", "listed", "in multi-node cases", "max |diff|");
  out << rule << "\n";
  for (const auto& [op, c] : ops) {
    std::ostringstream diff;
    diff << std::setprecision(2) << c.max_abs_diff;
    print_row(out, op, ratio(c.passed, c.run), c.listed ? std::to_string(c.listed) : "-",
              ratio(c.multi_passed, c.multi_run), c.passed + c.multi_passed ? diff.str() : "-");
  }
  out << rule << "\n";
  out << "cases: " << passed << " passed / " << passed + failed << " run (" << multi
      << " of them multi-node); " << failed << " failed; " << listed
      << " listed unsupported (skipped); " << unsupported << " op not supported\n";

  if (!missing.empty()) {
    std::vector<std::pair<std::string, int>> sorted(missing.begin(), missing.end());
    std::vector<std::string> words;
    for (const auto& [op, n] : sorted) words.push_back(op + "(" + std::to_string(n) + ")");
    out << "ops without a " << backend << " kernel (cases):\n";
    print_wrapped(out, words, 100, 2);
  }
  if (verbose) {
    out << "\nevery case:\n";
    for (const auto& r : results_) {
      static const char* kNames[] = {"pass", "FAIL", "listed", "no-op"};
      out << "  " << std::left << std::setw(7) << kNames[static_cast<int>(r.outcome)] << r.name;
      if (!r.message.empty() && r.outcome != Outcome::kFailed) out << "  (" << r.message << ")";
      out << "\n";
    }
  }
  out << "\nfailures: " << failed + static_cast<int>(errors_.size()) << "\n";
  for (const auto& r : results_) {
    if (r.outcome != Outcome::kFailed) continue;
    std::string op_list;
    for (const auto& op : r.ops) op_list += (op_list.empty() ? "" : ",") + op;
    out << "  FAIL " << r.name << " [" << op_list << "]: " << r.message << "\n";
  }
  for (const auto& error : errors_) out << "  ERROR " << error << "\n";
}

}  // namespace piper::conformance
