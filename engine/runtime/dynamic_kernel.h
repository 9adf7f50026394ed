// Kernels over tensors with run-time extents (plan::DynamicDim). Such a tensor is planned at
// its bound; in a step its extent is the value an earlier kernel (NonZero) wrote to an int64
// scalar, and its elements are packed from its start as for the shape with that extent. The
// kernel is prepared again, against views of those shapes, whenever the extents change, so
// every backend kernel works unchanged on what a step actually holds.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"

namespace piper::engine {

// Dimension `dim` of view `view` (inputs first, then outputs) has extent `scale` times the
// int64 at `extent`, at most the view's planned size.
struct RunTimeExtent {
  std::string tensor;  // the view's plan tensor, for errors
  size_t view = 0;
  int dim = 0;
  const void* extent = nullptr;
  int64_t scale = 1;
};

using KernelPreparer = std::function<std::unique_ptr<PreparedKernel>(std::vector<TensorView>,
                                                                     std::vector<TensorView>)>;

// A kernel that reads its extents from `backend` memory each run, checks them against the
// bounds (a piper::Error naming the tensor and dimension when one exceeds it) and runs what
// `prepare` made for those shapes.
std::unique_ptr<PreparedKernel> prepare_with_extents(Backend& backend,
                                                     std::vector<TensorView> inputs,
                                                     std::vector<TensorView> outputs,
                                                     std::vector<RunTimeExtent> extents,
                                                     KernelPreparer prepare);

}  // namespace piper::engine
