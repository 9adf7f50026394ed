// Shorthands for the op cases of the kernel harness.
#pragma once

#include "tests/gpu/op_harness.h"
#include "tests/unit/engine_test_util.h"

namespace piper::engine::testing {

inline TensorSpec F(Shape shape, double low = -1.0, double high = 1.0) {
  return TensorSpec{std::move(shape), plan::FLOAT32, low, high, {}};
}
inline TensorSpec BF(Shape shape, double low = -1.0, double high = 1.0) {
  return TensorSpec{std::move(shape), plan::BFLOAT16, low, high, {}};
}
inline TensorSpec I(Shape shape, int64_t low, int64_t high) {
  return TensorSpec{
      std::move(shape), plan::INT64, static_cast<double>(low), static_cast<double>(high), {}};
}
inline TensorSpec B(Shape shape) { return TensorSpec{std::move(shape), plan::BOOL, 0, 2, {}}; }
// A tensor holding `values` (a constant input: axes, shapes, split sizes).
inline TensorSpec Values(Shape shape, plan::DType dtype, std::vector<double> values) {
  return TensorSpec{std::move(shape), dtype, 0, 0, std::move(values)};
}

}  // namespace piper::engine::testing
