// Slice's geometry, shared by the CPU kernels (layout_ops.cc) and the CUDA ones: which
// elements of the data tensor the sliced tensor holds, from Slice's starts, ends, axes and
// steps inputs (ONNX clamping), with the CPU kernel's errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

// Checks Slice's (X, starts, ends[, axes[, steps]] -> Y) or piper.SliceGrad's (dY, ... -> dX)
// tensors, naming the op, and returns the views of the starts, ends, axes and steps inputs
// (absent ones with null data).
std::vector<TensorView> check_slice(const KernelArgs& args);

// The values of those inputs; axes and steps are empty when omitted.
struct SliceParameters {
  std::vector<int64_t> starts, ends;
  std::optional<std::vector<int64_t>> axes, steps;
};

// The parameters from check_slice()'s views and their values (empty for absent views).
SliceParameters slice_parameters(const std::vector<TensorView>& views,
                                 const std::vector<std::vector<int64_t>>& values);

// Where the sliced tensor's elements lie in the data: element sliced[i0, i1, ...] is
// data[base + i0 * strides[0] + i1 * strides[1] + ...] (data contiguous; strides may be
// negative).
struct SliceGeometry {
  int64_t base = 0;
  std::vector<int64_t> strides;
};

// Throws piper::Error "<op>: ..." when the parameters are malformed or slicing `data` does not
// give `sliced`'s shape.
SliceGeometry slice_geometry(const std::string& op, const SliceParameters& parameters,
                             const Shape& data, const Shape& sliced);

}  // namespace piper::engine::cpu
