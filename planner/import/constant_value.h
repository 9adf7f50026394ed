// A small dense value used while folding constants: shapes and indices are
// tiny, so every element is held as a double (exact for |int| < 2^53).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <vector>

namespace piper::planner {

struct ConstantValue {
  int32_t data_type = onnx::TensorProto::FLOAT;  // onnx::TensorProto::DataType
  std::vector<int64_t> shape;
  std::vector<double> values;

  int64_t size() const;
  bool is_integer() const;
};

// Returns false when the tensor's type cannot be folded (strings, complex...).
bool from_tensor_proto(const onnx::TensorProto& tensor, ConstantValue& value);
onnx::TensorProto to_tensor_proto(const ConstantValue& value, const std::string& name);

// Element-wise binary op with numpy broadcasting.
ConstantValue broadcast_binary(const ConstantValue& a, const ConstantValue& b, int32_t result_type,
                               double (*fn)(double, double));

}  // namespace piper::planner
