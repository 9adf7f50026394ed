// ONNX model -> op graph: batch specialisation, constant folding, shapes, and the Casts to
// double PyTorch writes before IsInf dropped.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <string>
#include <vector>

#include "formats/external_data.h"
#include "planner/ir/op_graph.h"

namespace piper::planner {

struct ImportOptions {
  // The batch size every graph input's leading dimension is planned for.
  int64_t batch = 1;
  // Initializers for which this returns true are not trained (integer ones never are).
  std::function<bool(const std::string& initializer)> is_frozen = [](const std::string&) {
    return false;
  };
};

// Loads `model_path` for import_model. Of external data, what planning reads (integer
// shapes, axes and indices: every tensor but float32 ones) is read into the model; float32
// weights stay in their files, for the engine to load. `files`, when given, receives the
// external data files.
onnx::ModelProto load_model_for_import(const std::string& model_path,
                                       std::vector<formats::ExternalFile>* files = nullptr);

// Builds the forward op graph. `model_name` is used in messages. Throws
// piper::Error naming the input or node when the model cannot be planned.
ir::OpGraph import_model(onnx::ModelProto model, const ImportOptions& options,
                         const std::string& model_name);

}  // namespace piper::planner
