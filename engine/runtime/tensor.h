// Tensor vocabulary shared by the runtime and the backends: dtypes, shapes and
// views of tensors in a backend's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "schemas/plan.pb.h"

namespace piper::engine {

using Shape = std::vector<int64_t>;

// Bytes per element: FLOAT32 4, BFLOAT16 2, INT64 8, BOOL 1. Throws piper::Error for others.
size_t dtype_size(plan::DType dtype);
// "float32", "bfloat16", "int64", "bool", or "unspecified".
std::string dtype_name(plan::DType dtype);
// Product of the dimensions (1 for a scalar). Throws piper::Error on a negative dimension.
int64_t num_elements(const Shape& shape);
// "[2, 3]"; "[]" for a scalar.
std::string shape_string(const Shape& shape);
// The number of elements of dimensions [begin, end) of `shape`.
int64_t product(const Shape& shape, size_t begin, size_t end);

// A tensor in a backend's memory. `data` is null for an omitted optional input or output.
struct TensorView {
  void* data = nullptr;
  plan::DType dtype = plan::DTYPE_UNSPECIFIED;
  Shape shape;

  bool present() const { return data != nullptr; }
  int64_t elements() const { return num_elements(shape); }
  size_t bytes() const { return static_cast<size_t>(elements()) * dtype_size(dtype); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

}  // namespace piper::engine
