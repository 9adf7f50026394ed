// piper-export: a checkpoint step's trained model, laid together from its shards, written as
// ONNX (the model with trained weights), as a PyTorch state dict in safetensors (the names
// state_dict() uses, tied weights' aliases too, from the model's "piper.tied_weights"
// metadata) and, optionally, as the inference graph (formats/onnx_inference.h).
#pragma once

#include <string>
#include <vector>

namespace piper::formats {

// The ONNX metadata_props key naming tied weights: a JSON object from each state_dict() name
// that has no initializer of its own to the initializer it shares its value with.
inline constexpr char kTiedWeightsKey[] = "piper.tied_weights";

struct ExportOptions {
  std::string checkpoint;    // a step folder, or a checkpoint folder (its latest committed step)
  std::string model;         // the ONNX model; empty: the one the index records
  std::string out;           // the folder written
  std::string prefix_strip;  // taken off the front of every state dict name
  bool inference = false;    // also OUT/inference.onnx
  std::string output;        // the inference graph's output; empty: found at the loss
};

struct ExportReport {
  std::string step_folder;
  std::string model_path;
  std::vector<std::string> written;  // the files, in the order written
  size_t state_dict_names = 0;
  size_t aliases = 0;
};

// Throws piper::Error naming the file, tensor or flag at fault; writes each file atomically
// and refuses an `out` that holds anything but piper-export's files.
ExportReport export_checkpoint(const ExportOptions& options);

}  // namespace piper::formats
