// ONNX import, as piper-plan runs it before planning: bytes -> ModelProto and the ONNX
// checker (formats/onnx_model.h), then Piper's import (planner/import: batch
// specialisation, constant folding, shape completion). The model's folder does not exist,
// so that external data names nothing real.
#include "formats/onnx_model.h"
#include "planner/import/import.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  piper::fuzz::quiet_protobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace piper;
  const std::string path = "/nonexistent-piper-fuzz/model.onnx";
  fuzz::refusing_is_fine([&] {
    onnx::ModelProto model = formats::parse_onnx_model(fuzz::as_string(data, size), path);
    planner::ImportOptions options;
    options.batch = 2;
    planner::import_model(std::move(model), options, path);
  });
  return 0;
}
