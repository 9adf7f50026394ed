// Reading and writing ONNX models: the planner's input, --save-onnx's and piper-export's output.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

#include "formats/external_data.h"

namespace piper::formats {

// Parses `path`, checks its external data (formats::ExternalData: locations confined to the
// model's folder, before any lookup) and runs the ONNX checker. Throws piper::Error naming
// the file when it is missing, unreadable, not ONNX, truncated or invalid.
onnx::ModelProto load_onnx_model(const std::string& path);
// The same for a model file's bytes already read from `path`.
onnx::ModelProto parse_onnx_model(const std::string& bytes, const std::string& path);

// The width in bytes of one element of an ONNX data type; 0 for strings and unknown types.
size_t onnx_element_size(int data_type);

// The raw little-endian bytes of an initializer stored inline (raw_data or typed fields).
// Throws piper::Error for external data.
std::vector<uint8_t> initializer_bytes(const onnx::TensorProto& tensor);

// A copy of `model` with the named initializers' values replaced by `values` (raw bytes, same
// dtype and shape), every tensor inline: what `external` (the model's) holds is read in. Throws
// piper::Error, naming `path` (where it is for), when a value has no initializer.
onnx::ModelProto with_initializers(const onnx::ModelProto& model,
                                   const std::map<std::string, std::vector<uint8_t>>& values,
                                   const ExternalData& external, const std::string& path);

// Writes `model` (every tensor inline) to `path` atomically: a temporary file renamed. Throws
// piper::Error naming the path when it is over protobuf's 2 GB or cannot be written.
void save_onnx_model(const onnx::ModelProto& model, const std::string& path);

// with_initializers, then save_onnx_model to `path`.
void save_onnx_with_initializers(const onnx::ModelProto& model,
                                 const std::map<std::string, std::vector<uint8_t>>& values,
                                 const ExternalData& external, const std::string& path);

}  // namespace piper::formats
