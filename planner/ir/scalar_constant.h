// A float32 scalar constant, as rewrites multiply by one (a mean's 1/n, a count of parts).
#pragma once

#include <cstring>
#include <string>

#include "planner/ir/op_graph.h"

namespace piper::ir {

inline Tensor scalar_constant(std::string name, float value) {
  Tensor tensor;
  tensor.name = std::move(name);
  tensor.role = Role::kConstant;
  tensor.data.resize(sizeof value);
  std::memcpy(tensor.data.data(), &value, sizeof value);
  return tensor;
}

}  // namespace piper::ir
