// A step's global batch on the host: rows [0, global_batch) of every graph input.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/runtime/tensor.h"

namespace piper::engine {

struct HostTensor {
  plan::DType dtype = plan::FLOAT32;
  Shape shape;                // leading dimension: samples
  std::vector<uint8_t> data;  // little-endian, C order
};

// Graph input name -> its rows for the step.
using Batch = std::map<std::string, HostTensor>;

}  // namespace piper::engine
