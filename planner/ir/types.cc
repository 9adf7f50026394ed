#include "planner/ir/types.h"

#include <stdexcept>

namespace piper::ir {
namespace {

template <typename Enum, size_t N>
Enum parse_enum(const std::string& text, const char* const (&names)[N], const char* what) {
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) return static_cast<Enum>(i);
  }
  throw std::invalid_argument("unknown " + std::string(what) + " '" + text + "'");
}

constexpr const char* kDTypeNames[] = {"f32", "i64", "bool", "bf16"};
constexpr const char* kRoleNames[] = {"input",           "activation", "parameter", "gradient",
                                      "optimizer_state", "loss",       "constant"};
constexpr const char* kPassNames[] = {"F", "B", "BI", "BW", "U"};

template <typename T>
const T* find_attr(const Attributes& attrs, const std::string& name) {
  const auto found = attrs.find(name);
  if (found == attrs.end()) return nullptr;
  const T* value = std::get_if<T>(&found->second);
  if (value == nullptr) throw std::invalid_argument("attribute '" + name + "' has another type");
  return value;
}

}  // namespace

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

bool is_float(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kBFloat16; }

int64_t onnx_data_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 1;
    case DType::kInt64:
      return 7;
    case DType::kBool:
      return 9;
    case DType::kBFloat16:
      return 16;
  }
  return 0;
}

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

std::string to_string(DType dtype) { return kDTypeNames[static_cast<int>(dtype)]; }
std::string to_string(Role role) { return kRoleNames[static_cast<int>(role)]; }
std::string to_string(Pass pass) { return kPassNames[static_cast<int>(pass)]; }

std::string to_string(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i ? "," : "") + std::to_string(shape[i]);
  }
  return text + "]";
}

std::string to_string(const Tags& tags) {
  std::string text = "{";
  for (const auto& [name, value] : tags) {
    text += (text.size() > 1 ? "," : "") + name + ":" + std::to_string(value);
  }
  return text + "}";
}

DType parse_dtype(const std::string& text) { return parse_enum<DType>(text, kDTypeNames, "dtype"); }
Role parse_role(const std::string& text) { return parse_enum<Role>(text, kRoleNames, "role"); }
Pass parse_pass(const std::string& text) { return parse_enum<Pass>(text, kPassNames, "pass"); }

int64_t attr_int(const Attributes& attrs, const std::string& name, int64_t fallback) {
  const auto* value = find_attr<int64_t>(attrs, name);
  return value ? *value : fallback;
}

double attr_float(const Attributes& attrs, const std::string& name, double fallback) {
  const auto* value = find_attr<double>(attrs, name);
  return value ? *value : fallback;
}

std::string attr_string(const Attributes& attrs, const std::string& name,
                        const std::string& fallback) {
  const auto* value = find_attr<std::string>(attrs, name);
  return value ? *value : fallback;
}

std::vector<int64_t> attr_ints(const Attributes& attrs, const std::string& name) {
  const auto* value = find_attr<std::vector<int64_t>>(attrs, name);
  return value ? *value : std::vector<int64_t>{};
}

}  // namespace piper::ir
