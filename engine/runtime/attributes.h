// Typed access to a plan kernel's attributes, with errors naming the op and attribute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schemas/plan.pb.h"

namespace piper::engine {

class Attributes {
 public:
  explicit Attributes(const plan::Kernel& kernel);

  bool has(const std::string& name) const;
  // An int attribute, or `fallback` when absent. Throws when present with another type.
  int64_t get_int(const std::string& name, int64_t fallback) const;
  // A float attribute (an int is accepted and converted), or `fallback` when absent.
  double get_float(const std::string& name, double fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  // An ints attribute (empty when present without a value), or `fallback` when absent.
  std::vector<int64_t> get_ints(const std::string& name,
                                const std::vector<int64_t>& fallback) const;
  // Throws naming the attribute when it is absent.
  int64_t require_int(const std::string& name) const;
  double require_float(const std::string& name) const;

 private:
  const plan::Attribute* find(const std::string& name) const;
  [[noreturn]] void wrong_type(const plan::Attribute& attribute, const char* expected) const;

  const plan::Kernel& kernel_;
};

}  // namespace piper::engine
