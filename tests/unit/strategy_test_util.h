// Helpers the strategy tests share: parse errors as text, a minimal strategy around a
// directive list, a directive's spec by type, and the error-case table each suite fills.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "formats/error.h"
#include "formats/strategy.h"

namespace piper::strategy {

// The message parse_strategy throws for `text`, or "" when it parses.
inline std::string error_of(const std::string& text) {
  try {
    parse_strategy(text, "strategy.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A minimal valid strategy with `directives` as its directive list.
inline std::string with_directives(const std::string& directives) {
  return R"({"batch": {"global": 8}, "directives": )" + directives + "}";
}

// The same with a top-level "mesh" (its JSON value).
inline std::string with_mesh(const std::string& mesh, const std::string& directives) {
  return R"({"batch": {"global": 8}, "mesh": )" + mesh + R"(, "directives": )" + directives + "}";
}

template <typename T>
const T& spec_of(const Strategy& s, size_t index) {
  EXPECT_LT(index, s.directives.size());
  const T* spec = std::get_if<T>(&s.directives.at(index).spec);
  EXPECT_NE(spec, nullptr) << "directive " << index << " is not " << T::kOp;
  return *spec;
}

// A strategy text and the whole message parsing it must throw.
struct ErrorCase {
  std::string name;
  std::string text;
  std::string message;
};

inline void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

}  // namespace piper::strategy
