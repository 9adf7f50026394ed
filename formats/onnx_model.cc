#include "formats/onnx_model.h"

#include <onnx/checker.h>

#include <cstring>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/external_data.h"

namespace piper::formats {
namespace {

template <typename Field>
std::vector<uint8_t> pack(const Field& values, size_t width) {
  std::vector<uint8_t> bytes(static_cast<size_t>(values.size()) * width);
  for (int i = 0; i < values.size(); ++i) {
    const auto value = values.Get(i);
    for (size_t b = 0; b < width; ++b) {
      bytes[i * width + b] = static_cast<uint8_t>((static_cast<uint64_t>(value) >> (8 * b)) & 0xff);
    }
  }
  return bytes;
}

}  // namespace

size_t onnx_element_size(int data_type) {
  switch (data_type) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::UINT32:
      return 4;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::UINT64:
    case onnx::TensorProto::DOUBLE:
      return 8;
    case onnx::TensorProto::BFLOAT16:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16:
      return 2;
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::INT8:
      return 1;
    default:
      return 0;
  }
}

onnx::ModelProto load_onnx_model(const std::string& path) {
  return parse_onnx_model(read_file(path), path);
}

onnx::ModelProto parse_onnx_model(const std::string& bytes, const std::string& path) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    throw Error("'" + path + "' is not an ONNX model (it does not parse as ModelProto; " +
                "truncated or another format?)");
  }
  if (!model.has_graph() || model.graph().node_size() == 0) {
    throw Error("'" + path + "' is not an ONNX model: it has no graph nodes");
  }
  // Before the checker, which looks every external location up relative to the working
  // directory: what it finds would tell a model's author which paths exist.
  const ExternalData external(model, path);
  try {
    onnx::checker::check_model(external.empty() ? model : external.with_resolved_locations(model));
  } catch (const std::exception& error) {
    throw Error("ONNX model '" + path + "' fails the ONNX checker: " + error.what());
  }
  return model;
}

std::vector<uint8_t> initializer_bytes(const onnx::TensorProto& tensor) {
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    throw Error("initializer '" + tensor.name() +
                "' keeps its data in an external file; it is read with the model's "
                "formats::ExternalData");
  }
  if (tensor.has_raw_data()) {
    const std::string& raw = tensor.raw_data();
    return std::vector<uint8_t>(raw.begin(), raw.end());
  }
  switch (tensor.data_type()) {
    case onnx::TensorProto::FLOAT: {
      std::vector<uint8_t> bytes(tensor.float_data_size() * sizeof(float));
      std::memcpy(bytes.data(), tensor.float_data().data(), bytes.size());
      return bytes;
    }
    case onnx::TensorProto::DOUBLE: {  // scalars PyTorch exports, e.g. torch.clamp's bounds
      std::vector<uint8_t> bytes(tensor.double_data_size() * sizeof(double));
      std::memcpy(bytes.data(), tensor.double_data().data(), bytes.size());
      return bytes;
    }
    case onnx::TensorProto::INT64:
      return pack(tensor.int64_data(), 8);
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::BFLOAT16:  // ONNX keeps each value's 16 bits in an int32
      return pack(tensor.int32_data(), onnx_element_size(tensor.data_type()));
    default:
      throw Error("initializer '" + tensor.name() + "' has unsupported data type " +
                  std::to_string(tensor.data_type()));
  }
}

onnx::ModelProto with_initializers(const onnx::ModelProto& model,
                                   const std::map<std::string, std::vector<uint8_t>>& values,
                                   const ExternalData& external, const std::string& path) {
  onnx::ModelProto trained = model;
  size_t replaced = 0;
  for (auto& initializer : *trained.mutable_graph()->mutable_initializer()) {
    const auto found = values.find(initializer.name());
    if (found == values.end()) {
      continue;
    }
    const auto& bytes = found->second;
    initializer.clear_float_data();
    initializer.clear_int64_data();
    initializer.clear_int32_data();
    initializer.clear_external_data();
    initializer.clear_data_location();
    initializer.set_raw_data(bytes.data(), bytes.size());
    ++replaced;
  }
  if (replaced != values.size()) {
    throw Error("cannot save '" + path + "': " + std::to_string(values.size() - replaced) +
                " trained tensors have no initializer of that name in the model");
  }
  // The saved model stands on its own, wherever it is written: what stayed in external files
  // (frozen weights) comes inline too.
  inline_external_data(trained, external, [](const onnx::TensorProto&) { return true; });
  return trained;
}

void save_onnx_model(const onnx::ModelProto& trained, const std::string& path) {
  const size_t size = trained.ByteSizeLong();
  if (size > static_cast<size_t>(INT32_MAX)) {
    throw Error("cannot save '" + path + "': the trained model is " + std::to_string(size) +
                " bytes, over protobuf's 2 GB limit on one .onnx, and Piper writes no "
                "external data yet");
  }
  std::string bytes;
  if (!trained.SerializeToString(&bytes)) {
    throw Error("cannot serialize the trained model for '" + path + "'");
  }
  write_file_atomically(path, bytes);
}

void save_onnx_with_initializers(const onnx::ModelProto& model,
                                 const std::map<std::string, std::vector<uint8_t>>& values,
                                 const ExternalData& external, const std::string& path) {
  save_onnx_model(with_initializers(model, values, external, path), path);
}

}  // namespace piper::formats
