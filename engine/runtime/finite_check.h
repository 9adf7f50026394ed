// piper-run --check-finite: kernels wrapped so that, after each runs, every float output it
// wrote is scanned, and the first NaN or infinity stops the step naming the tensor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"

namespace piper::engine {

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
