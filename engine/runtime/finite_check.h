// piper-run --check-finite: kernels wrapped so that, after each runs, every float output it
// wrote is scanned, and the first NaN or infinity stops the step naming the tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"

namespace piper::engine {

// A NaN or infinity found in a tensor's bytes.
struct NonFiniteValue {
  int64_t index = 0;  // of the element
  float value = 0.0f;
  std::string describe() const;  // "NaN", "+inf" or "-inf"
};

// The first NaN or infinity among the float32 or bfloat16 elements of `bytes`, or none.
std::optional<NonFiniteValue> first_non_finite(const std::vector<uint8_t>& bytes,
                                               plan::DType dtype);
inline std::optional<NonFiniteValue> first_non_finite_float32(const std::vector<uint8_t>& bytes) {
  return first_non_finite(bytes, plan::FLOAT32);
}

struct CheckedOutput {
  std::string label;  // names the tensor in the error, e.g. "tensor 12 'h' [32, 64]"
  TensorView view;
};

// `kernel`, then a scan of its float32 and bfloat16 `outputs` read back through `backend`;
// throws NonFiniteError naming the first non-finite element. The outputs must be written
// by the time run() returns (host backends).
std::unique_ptr<PreparedKernel> check_finite_outputs(std::unique_ptr<PreparedKernel> kernel,
                                                     std::vector<CheckedOutput> outputs,
                                                     Backend& backend);

}  // namespace piper::engine
