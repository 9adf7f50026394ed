// samples/gpt imported for planner tests: its causal masks frozen, as strategies freeze them.
#pragma once

#include <string>

#include "formats/onnx_model.h"
#include "planner/import/import.h"

namespace piper::testing {

inline ir::OpGraph import_gpt_sample(int64_t batch) {
  planner::ImportOptions options;
  options.batch = batch;
  options.is_frozen = [](const std::string& name) {
    return name.find("mask") != std::string::npos;
  };
  return planner::import_model(formats::load_onnx_model(PIPER_SOURCE_DIR "/samples/gpt/model.onnx"),
                               options, "gpt");
}

}  // namespace piper::testing
