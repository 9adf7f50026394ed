// A small dense value used while folding constants. Integer and bool elements are held
// exactly as int64 (PyTorch writes INT64_MAX as the end of every open slice, which no
// double holds); float and double elements as double, a float32 one always a value that
// float32 represents, so folding never computes in a precision the engine does not.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace piper::planner {

struct ConstantValue {
  int32_t data_type = onnx::TensorProto::FLOAT;  // onnx::TensorProto::DataType
  std::vector<int64_t> shape;
  std::vector<int64_t> ints;  // integer and bool dtypes (bools 0 or 1)
  std::vector<double> reals;  // FLOAT and DOUBLE

  // The element count of `shape`; throws piper::Error when a dimension is negative or the
  // product overflows int64.
  int64_t size() const;
  bool is_integer() const;
  // How many elements are held, whichever storage holds them.
  size_t stored() const { return is_integer() ? ints.size() : reals.size(); }
};

// An int64 value of shape {ints.size()}.
ConstantValue int_vector(const std::vector<int64_t>& ints);

// Returns false when the tensor's type cannot be folded (strings, complex...).
bool from_tensor_proto(const onnx::TensorProto& tensor, ConstantValue& value);
onnx::TensorProto to_tensor_proto(const ConstantValue& value, const std::string& name);

// The product of `dims`; throws piper::Error when a dimension is negative or it overflows.
int64_t checked_product(const std::vector<int64_t>& dims);

// A value of `shape` whose element i is source's element flat[i]: how Gather, Slice,
// Transpose, Expand and Tile move elements without touching them.
ConstantValue take(const ConstantValue& source, const std::vector<int64_t>& flat,
                   std::vector<int64_t> shape);

// Numpy broadcasting of two shapes: the result's shape and, per result element, the flat
// index of the element of each operand it reads. Throws piper::Error naming both shapes.
struct Broadcast {
  std::vector<int64_t> shape;
  std::vector<int64_t> a, b;
};
Broadcast broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// The flat index in a tensor of `shape` that each element of `out_shape` reads when `shape`
// is broadcast to it (right-aligned, size-1 dimensions repeated).
std::vector<int64_t> broadcast_index(const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& out_shape);

std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace piper::planner
