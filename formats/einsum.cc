#include "formats/einsum.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "formats/error.h"

namespace piper::formats {
namespace {

int letter_label(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -1;
}

char label_letter(int label) {
  return static_cast<char>(label < 26 ? 'a' + label : 'A' + (label - 26));
}

// One operand's term: its letters and where (if anywhere) the ellipsis stands.
struct Term {
  std::vector<int> letters;
  int ellipsis_at = -1;  // index into letters before which the ellipsis stands
};

Term parse_term(const std::string& text, const std::string& equation) {
  Term term;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "...") == 0) {
      if (term.ellipsis_at >= 0) {
        throw Error("einsum equation '" + equation + "': term '" + text +
                    "' has more than one ellipsis");
      }
      term.ellipsis_at = static_cast<int>(term.letters.size());
      i += 2;
      continue;
    }
    const int label = letter_label(text[i]);
    if (label < 0) {
      throw Error("einsum equation '" + equation + "': '" + std::string(1, text[i]) +
                  "' is not a letter or an ellipsis");
    }
    term.letters.push_back(label);
  }
  return term;
}

// The term's labels for an operand whose ellipsis covers `ellipsis_dims` of `max_dims`.
std::vector<int> expand(const Term& term, size_t ellipsis_dims, size_t max_dims) {
  std::vector<int> labels;
  for (size_t i = 0; i <= term.letters.size(); ++i) {
    if (static_cast<int>(i) == term.ellipsis_at) {
      for (size_t e = max_dims - ellipsis_dims; e < max_dims; ++e)
        labels.push_back(kEllipsisLabel + static_cast<int>(e));
    }
    if (i < term.letters.size()) labels.push_back(term.letters[i]);
  }
  return labels;
}

}  // namespace

EinsumEquation parse_einsum(const std::string& equation, const std::vector<size_t>& ranks) {
  std::string text;
  for (char c : equation) {
    if (!std::isspace(static_cast<unsigned char>(c))) text += c;
  }
  const size_t arrow = text.find("->");
  const std::string lhs = text.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma - start), equation));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ranks.size()) {
    throw Error("einsum equation '" + equation + "' has " + std::to_string(terms.size()) +
                " operand terms but the op has " + std::to_string(ranks.size()) + " inputs");
  }
  size_t max_ellipsis = 0;
  std::vector<size_t> ellipsis_dims(terms.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const size_t letters = terms[i].letters.size();
    const bool fits = terms[i].ellipsis_at >= 0 ? ranks[i] >= letters : ranks[i] == letters;
    if (!fits) {
      throw Error("einsum equation '" + equation + "': operand " + std::to_string(i) +
                  " has rank " + std::to_string(ranks[i]) + " but its term names " +
                  std::to_string(letters) + " dimensions" +
                  (terms[i].ellipsis_at >= 0 ? " besides the ellipsis" : ""));
    }
    ellipsis_dims[i] = ranks[i] - letters;
    max_ellipsis = std::max(max_ellipsis, ellipsis_dims[i]);
  }
  EinsumEquation result;
  std::array<int, kEllipsisLabel> counts{};
  for (size_t i = 0; i < terms.size(); ++i) {
    result.inputs.push_back(expand(terms[i], ellipsis_dims[i], max_ellipsis));
    for (int label : terms[i].letters) ++counts[label];
  }
  if (arrow == std::string::npos) {
    for (size_t e = 0; e < max_ellipsis; ++e)
      result.output.push_back(kEllipsisLabel + static_cast<int>(e));
    std::vector<int> once;
    for (int label = 0; label < kEllipsisLabel; ++label) {
      if (counts[label] == 1) once.push_back(label);
    }
    // Alphabetical by character code: uppercase letters sort before lowercase ones.
    std::sort(once.begin(), once.end(),
              [](int a, int b) { return label_letter(a) < label_letter(b); });
    result.output.insert(result.output.end(), once.begin(), once.end());
    return result;
  }
  const Term out = parse_term(text.substr(arrow + 2), equation);
  const bool any_ellipsis =
      std::any_of(terms.begin(), terms.end(), [](const Term& t) { return t.ellipsis_at >= 0; });
  if (out.ellipsis_at < 0 && any_ellipsis && max_ellipsis > 0) {
    throw Error("einsum equation '" + equation +
                "': the operands have an ellipsis but the output does not");
  }
  result.output = expand(out, out.ellipsis_at >= 0 ? max_ellipsis : 0, max_ellipsis);
  for (size_t i = 0; i < out.letters.size(); ++i) {
    const int label = out.letters[i];
    if (counts[label] == 0) {
      throw Error("einsum equation '" + equation + "': output label '" +
                  std::string(1, label_letter(label)) + "' appears in no operand");
    }
    if (std::count(out.letters.begin(), out.letters.end(), label) > 1) {
      throw Error("einsum equation '" + equation + "': output label '" +
                  std::string(1, label_letter(label)) + "' appears more than once");
    }
  }
  return result;
}

std::string einsum_string(const EinsumEquation& equation) {
  std::array<bool, kEllipsisLabel> used{};
  int extra = 0;
  auto note = [&](const std::vector<int>& labels) {
    for (int label : labels) {
      if (label < kEllipsisLabel) {
        used[label] = true;
      } else {
        extra = std::max(extra, label - kEllipsisLabel + 1);
      }
    }
  };
  for (const auto& labels : equation.inputs) note(labels);
  note(equation.output);
  std::vector<char> spare;
  for (int label = 0; label < kEllipsisLabel && static_cast<int>(spare.size()) < extra; ++label) {
    if (!used[label]) spare.push_back(label_letter(label));
  }
  if (static_cast<int>(spare.size()) < extra) {
    throw Error("einsum equation: too many dimensions to name with letters");
  }
  auto term = [&](const std::vector<int>& labels) {
    std::string text;
    for (int label : labels) {
      text += label < kEllipsisLabel ? label_letter(label) : spare[label - kEllipsisLabel];
    }
    return text;
  };
  std::string text;
  for (size_t i = 0; i < equation.inputs.size(); ++i) {
    text += (i == 0 ? "" : ",") + term(equation.inputs[i]);
  }
  return text + "->" + term(equation.output);
}

}  // namespace piper::formats
