// Reading and writing ONNX models: the planner's input and --save-onnx's output.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

namespace piper::formats {

// Parses `path` and runs the ONNX checker. Throws piper::Error naming the file
// when it is missing, unreadable, not ONNX, truncated or invalid.
onnx::ModelProto load_onnx_model(const std::string& path);
// The same for a model file's bytes already read from `path`.
onnx::ModelProto parse_onnx_model(const std::string& bytes, const std::string& path);

// The raw little-endian bytes of an initializer, whether stored inline
// (raw_data or typed fields). Throws piper::Error for external data.
std::vector<uint8_t> initializer_bytes(const onnx::TensorProto& tensor);

// Writes `model` to `path` with the named initializers' values replaced by
// `values` (raw bytes, same dtype and shape). Atomic: a temporary file renamed.
void save_onnx_with_initializers(const onnx::ModelProto& model,
                                 const std::map<std::string, std::vector<uint8_t>>& values,
                                 const std::string& path);

}  // namespace piper::formats
