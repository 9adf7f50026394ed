#include "engine/runtime/attributes.h"

#include "formats/error.h"

namespace piper::engine {
namespace {

const char* value_kind(const plan::Attribute& attribute) {
  switch (attribute.value_case()) {
    case plan::Attribute::kI:
      return "int";
    case plan::Attribute::kF:
      return "float";
    case plan::Attribute::kS:
      return "string";
    case plan::Attribute::kInts:
      return "ints";
    case plan::Attribute::kFloats:
      return "floats";
    default:
      return "no value";
  }
}

}  // namespace

Attributes::Attributes(const plan::Kernel& kernel) : kernel_(kernel) {}

const plan::Attribute* Attributes::find(const std::string& name) const {
  for (const auto& attribute : kernel_.attributes()) {
    if (attribute.name() == name) {
      return &attribute;
    }
  }
  return nullptr;
}

void Attributes::wrong_type(const plan::Attribute& attribute, const char* expected) const {
  throw Error(kernel_.op_type() + ": attribute '" + attribute.name() + "' should be " + expected +
              " but the plan holds " + value_kind(attribute) +
              "; the plan was written by an incompatible planner");
}

bool Attributes::has(const std::string& name) const { return find(name) != nullptr; }

int64_t Attributes::get_int(const std::string& name, int64_t fallback) const {
  const plan::Attribute* attribute = find(name);
  if (attribute == nullptr) {
    return fallback;
  }
  if (attribute->value_case() != plan::Attribute::kI) {
    wrong_type(*attribute, "an int");
  }
  return attribute->i();
}

double Attributes::get_float(const std::string& name, double fallback) const {
  const plan::Attribute* attribute = find(name);
  if (attribute == nullptr) {
    return fallback;
  }
  if (attribute->value_case() == plan::Attribute::kI) {
    return static_cast<double>(attribute->i());
  }
  if (attribute->value_case() != plan::Attribute::kF) {
    wrong_type(*attribute, "a float");
  }
  return attribute->f();
}

std::string Attributes::get_string(const std::string& name, const std::string& fallback) const {
  const plan::Attribute* attribute = find(name);
  if (attribute == nullptr) {
    return fallback;
  }
  if (attribute->value_case() != plan::Attribute::kS) {
    wrong_type(*attribute, "a string");
  }
  return attribute->s();
}

std::vector<int64_t> Attributes::get_ints(const std::string& name,
                                          const std::vector<int64_t>& fallback) const {
  const plan::Attribute* attribute = find(name);
  if (attribute == nullptr) {
    return fallback;
  }
  if (attribute->value_case() == plan::Attribute::VALUE_NOT_SET) {
    return {};  // an empty list written without its (empty) Ints message
  }
  if (attribute->value_case() != plan::Attribute::kInts) {
    wrong_type(*attribute, "ints");
  }
  return {attribute->ints().values().begin(), attribute->ints().values().end()};
}

int64_t Attributes::require_int(const std::string& name) const {
  if (!has(name)) {
    throw Error(kernel_.op_type() + ": required attribute '" + name + "' is missing");
  }
  return get_int(name, 0);
}

double Attributes::require_float(const std::string& name) const {
  if (!has(name)) {
    throw Error(kernel_.op_type() + ": required attribute '" + name + "' is missing");
  }
  return get_float(name, 0.0);
}

}  // namespace piper::engine
