#include "engine/runtime/tensor.h"

#include "formats/error.h"

namespace piper::engine {

size_t dtype_size(plan::DType dtype) {
  switch (dtype) {
    case plan::FLOAT32:
      return 4;
    case plan::INT64:
      return 8;
    case plan::BOOL:
      return 1;
    case plan::BFLOAT16:
      return 2;
    default:
      throw Error("tensor dtype " + dtype_name(dtype) +
                  " has no element size; the plan must give every tensor a dtype "
                  "(float32, bfloat16, int64 or bool)");
  }
}

std::string dtype_name(plan::DType dtype) {
  switch (dtype) {
    case plan::FLOAT32:
      return "float32";
    case plan::INT64:
      return "int64";
    case plan::BOOL:
      return "bool";
    case plan::BFLOAT16:
      return "bfloat16";
    case plan::DTYPE_UNSPECIFIED:
      return "unspecified";
    default:
      return "dtype#" + std::to_string(static_cast<int>(dtype));
  }
}

int64_t num_elements(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      throw Error("shape " + shape_string(shape) + " has a negative dimension");
    }
    count *= dim;
  }
  return count;
}

std::string shape_string(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + "]";
}

int64_t product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= shape[d];
  return n;
}

}  // namespace piper::engine
