// ONNX external data: tensors whose bytes live in files beside the .onnx (what
// onnx.save_model(save_as_external_data=True) and torch.onnx.export write for models over
// protobuf's 2 GB). Piper reads them only from regular files inside the model's folder.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "schemas/plan.pb.h"

namespace piper::formats {

// A file external data is read from, as it was when checked.
struct ExternalFile {
  std::string location;  // as the model writes it, relative to the model's folder
  std::string path;      // resolved: inside the model's folder, through no symlink
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // modification time, nanoseconds since the epoch
};

// Receives consecutive pieces of a tensor's bytes.
using ByteSink = std::function<void(const uint8_t* data, size_t size)>;

class ExternalData {
 public:
  ExternalData() = default;

  // Checks every externally stored tensor of `model`, read from `model_path` (initializers,
  // sparse initializers, tensor attributes, subgraphs and functions). Its location must be
  // relative with no '..' component — refused from its text alone, before any file system
  // lookup, so the refusal tells nothing about what exists — and then lead, symlinks
  // resolved one by one, to a regular file inside the model's folder: a symlink whose target
  // leaves the folder is refused without looking the target up. `offset` and `length` must
  // lie within the file, and `length` must be what the tensor's shape and type need.
  // Throws piper::Error naming the model, the tensor and the location.
  ExternalData(const onnx::ModelProto& model, const std::string& model_path);

  // The files read, by location, in location order.
  std::vector<ExternalFile> files() const;
  bool empty() const { return files_.empty(); }

  // The bytes [offset, offset + count) of the data of `tensor` (one of the model's that this
  // checked), read from its file in pieces of at most 64 MiB handed to `sink`: no whole copy
  // is held. Throws piper::Error when the range exceeds the tensor or the read fails.
  void read(const onnx::TensorProto& tensor, uint64_t offset, uint64_t count,
            const ByteSink& sink) const;
  // The byte length of the data of `tensor`.
  uint64_t length(const onnx::TensorProto& tensor) const;

  // A copy of `model` whose external locations are the resolved paths, for onnx::checker,
  // which looks each location up relative to the working directory.
  onnx::ModelProto with_resolved_locations(const onnx::ModelProto& model) const;

 private:
  struct Range {
    const ExternalFile* file;
    uint64_t offset;
    uint64_t length;
  };
  Range range(const onnx::TensorProto& tensor) const;
  // Checks one external tensor; `what` names the model and the tensor.
  void check(const onnx::TensorProto& tensor, const std::string& what);
  // The file of `location` (already judged by its text), resolved inside the folder.
  const ExternalFile& file(const std::string& location, const std::string& at);

  std::string model_path_;
  std::string folder_;                         // canonical, once a tensor is external
  std::map<std::string, ExternalFile> files_;  // by location
};

// What a plan records of an external data file.
plan::ExternalFile to_plan(const ExternalFile& file);

// Throws piper::Error naming the file when one of `recorded` (a plan's) differs in size or
// modification time from what `external` found now, or is not one of its files.
void check_unchanged(const ExternalData& external,
                     const google::protobuf::RepeatedPtrField<plan::ExternalFile>& recorded,
                     const std::string& model_path);

// Moves the data of every external tensor of `model` for which `wanted` holds into the
// tensor itself (raw_data), reading it through `external`.
void inline_external_data(onnx::ModelProto& model, const ExternalData& external,
                          const std::function<bool(const onnx::TensorProto&)>& wanted);

}  // namespace piper::formats
