#include "planner/import/constant_value.h"

#include <algorithm>
#include <cstring>

#include "formats/error.h"
#include "formats/onnx_model.h"

namespace piper::planner {
namespace {

std::vector<int64_t> strides_for(const std::vector<int64_t>& shape,
                                 const std::vector<int64_t>& out_shape) {
  // Strides of `shape` right-aligned against `out_shape`, 0 where broadcast.
  std::vector<int64_t> strides(out_shape.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t axis = shape.size() - 1 - i;
    const size_t out_axis = out_shape.size() - 1 - i;
    strides[out_axis] = shape[axis] == 1 ? 0 : stride;
    stride *= shape[axis];
  }
  return strides;
}

template <typename T>
void append_values(const std::vector<uint8_t>& bytes, std::vector<double>& values) {
  const size_t count = bytes.size() / sizeof(T);
  for (size_t i = 0; i < count; ++i) {
    T element;
    std::memcpy(&element, bytes.data() + i * sizeof(T), sizeof(T));
    values.push_back(static_cast<double>(element));
  }
}

}  // namespace

int64_t ConstantValue::size() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

bool ConstantValue::is_integer() const {
  return data_type != onnx::TensorProto::FLOAT && data_type != onnx::TensorProto::DOUBLE;
}

bool from_tensor_proto(const onnx::TensorProto& tensor, ConstantValue& value) {
  value.data_type = tensor.data_type();
  value.shape.assign(tensor.dims().begin(), tensor.dims().end());
  value.values.clear();
  const std::vector<uint8_t> bytes = formats::initializer_bytes(tensor);
  switch (tensor.data_type()) {
    case onnx::TensorProto::FLOAT:
      append_values<float>(bytes, value.values);
      break;
    case onnx::TensorProto::DOUBLE:
      append_values<double>(bytes, value.values);
      break;
    case onnx::TensorProto::INT64:
      append_values<int64_t>(bytes, value.values);
      break;
    case onnx::TensorProto::INT32:
      append_values<int32_t>(bytes, value.values);
      break;
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::UINT8:
      append_values<uint8_t>(bytes, value.values);
      break;
    default:
      return false;
  }
  return static_cast<int64_t>(value.values.size()) == value.size();
}

onnx::TensorProto to_tensor_proto(const ConstantValue& value, const std::string& name) {
  onnx::TensorProto tensor;
  tensor.set_name(name);
  tensor.set_data_type(value.data_type);
  for (int64_t dim : value.shape) tensor.add_dims(dim);
  for (double element : value.values) {
    switch (value.data_type) {
      case onnx::TensorProto::FLOAT:
        tensor.add_float_data(static_cast<float>(element));
        break;
      case onnx::TensorProto::DOUBLE:
        tensor.add_double_data(element);
        break;
      case onnx::TensorProto::INT64:
        tensor.add_int64_data(static_cast<int64_t>(element));
        break;
      default:
        tensor.add_int32_data(static_cast<int32_t>(element));
        break;
    }
  }
  return tensor;
}

ConstantValue broadcast_binary(const ConstantValue& a, const ConstantValue& b, int32_t result_type,
                               double (*fn)(double, double)) {
  ConstantValue out;
  out.data_type = result_type;
  const size_t rank = std::max(a.shape.size(), b.shape.size());
  out.shape.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.shape.size() ? 1 : a.shape[i - (rank - a.shape.size())];
    const int64_t db = i < rank - b.shape.size() ? 1 : b.shape[i - (rank - b.shape.size())];
    if (da != db && da != 1 && db != 1) {
      throw Error("cannot broadcast constant shapes while folding");
    }
    out.shape[i] = std::max(da, db);
  }
  const auto sa = strides_for(a.shape, out.shape);
  const auto sb = strides_for(b.shape, out.shape);
  const int64_t n = out.size();
  out.values.resize(n);
  std::vector<int64_t> index(rank, 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < rank; ++d) {
      oa += index[d] * sa[d];
      ob += index[d] * sb[d];
    }
    out.values[flat] = fn(a.values[oa], b.values[ob]);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < out.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

}  // namespace piper::planner
