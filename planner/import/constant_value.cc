#include "planner/import/constant_value.h"

#include <algorithm>
#include <cstring>

#include "formats/error.h"
#include "formats/onnx_model.h"

namespace piper::planner {
namespace {

template <typename T, typename Out>
void append_values(const std::vector<uint8_t>& bytes, std::vector<Out>& values) {
  const size_t count = bytes.size() / sizeof(T);
  for (size_t i = 0; i < count; ++i) {
    T element;
    std::memcpy(&element, bytes.data() + i * sizeof(T), sizeof(T));
    values.push_back(static_cast<Out>(element));
  }
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int64_t checked_product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t dim : dims) {
    if (dim < 0) throw Error("shape " + shape_text(dims) + " has a negative dimension");
    if (__builtin_mul_overflow(n, dim, &n)) {
      throw Error("shape " + shape_text(dims) + " has more elements than int64 counts");
    }
  }
  return n;
}

int64_t ConstantValue::size() const { return checked_product(shape); }

bool ConstantValue::is_integer() const {
  return data_type != onnx::TensorProto::FLOAT && data_type != onnx::TensorProto::DOUBLE;
}

ConstantValue int_vector(const std::vector<int64_t>& ints) {
  ConstantValue value;
  value.data_type = onnx::TensorProto::INT64;
  value.shape = {static_cast<int64_t>(ints.size())};
  value.ints = ints;
  return value;
}

bool from_tensor_proto(const onnx::TensorProto& tensor, ConstantValue& value) {
  // Float weights kept in external files (frozen ones included) are the engine's to load:
  // their values fold into nothing, and reading gigabytes of them here would cost the plan.
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) return false;
  value.data_type = tensor.data_type();
  value.shape.assign(tensor.dims().begin(), tensor.dims().end());
  value.ints.clear();
  value.reals.clear();
  const std::vector<uint8_t> bytes = formats::initializer_bytes(tensor);
  switch (tensor.data_type()) {
    case onnx::TensorProto::FLOAT:
      append_values<float>(bytes, value.reals);
      break;
    case onnx::TensorProto::DOUBLE:
      append_values<double>(bytes, value.reals);
      break;
    case onnx::TensorProto::INT64:
      append_values<int64_t>(bytes, value.ints);
      break;
    case onnx::TensorProto::INT32:
      append_values<int32_t>(bytes, value.ints);
      break;
    case onnx::TensorProto::BOOL:
      append_values<uint8_t>(bytes, value.ints);
      for (int64_t& element : value.ints) element = element != 0;
      break;
    case onnx::TensorProto::UINT8:
      append_values<uint8_t>(bytes, value.ints);
      break;
    default:
      return false;
  }
  return static_cast<int64_t>(value.stored()) == value.size();
}

onnx::TensorProto to_tensor_proto(const ConstantValue& value, const std::string& name) {
  onnx::TensorProto tensor;
  tensor.set_name(name);
  tensor.set_data_type(value.data_type);
  for (int64_t dim : value.shape) tensor.add_dims(dim);
  switch (value.data_type) {
    case onnx::TensorProto::FLOAT:
      for (double element : value.reals) tensor.add_float_data(static_cast<float>(element));
      break;
    case onnx::TensorProto::DOUBLE:
      for (double element : value.reals) tensor.add_double_data(element);
      break;
    case onnx::TensorProto::INT64:
      for (int64_t element : value.ints) tensor.add_int64_data(element);
      break;
    default:  // int32, bool and uint8 live in int32_data
      for (int64_t element : value.ints) tensor.add_int32_data(static_cast<int32_t>(element));
      break;
  }
  return tensor;
}

ConstantValue take(const ConstantValue& source, const std::vector<int64_t>& flat,
                   std::vector<int64_t> shape) {
  ConstantValue out;
  out.data_type = source.data_type;
  out.shape = std::move(shape);
  auto copy = [&](const auto& from, auto& to) {
    to.reserve(flat.size());
    for (int64_t index : flat) to.push_back(from.at(index));
  };
  if (source.is_integer()) {
    copy(source.ints, out.ints);
  } else {
    copy(source.reals, out.reals);
  }
  return out;
}

std::vector<int64_t> broadcast_index(const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& out_shape) {
  // Strides of `shape` right-aligned against `out_shape`, 0 where broadcast.
  const size_t rank = out_shape.size();
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t axis = shape.size() - 1 - i;
    strides[rank - 1 - i] = shape[axis] == 1 ? 0 : stride;
    stride *= shape[axis];
  }
  std::vector<int64_t> flat(static_cast<size_t>(checked_product(out_shape)));
  std::vector<int64_t> index(rank, 0);
  for (int64_t& source : flat) {
    source = 0;
    for (size_t d = 0; d < rank; ++d) source += index[d] * strides[d];
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < out_shape[d]) break;
      index[d] = 0;
    }
  }
  return flat;
}

Broadcast broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  Broadcast result;
  const size_t rank = std::max(a.size(), b.size());
  result.shape.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw Error("shapes " + shape_text(a) + " and " + shape_text(b) + " do not broadcast");
    }
    result.shape[i] = da == 1 ? db : da;
  }
  result.a = broadcast_index(a, result.shape);
  result.b = broadcast_index(b, result.shape);
  return result;
}

}  // namespace piper::planner
