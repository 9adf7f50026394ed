#include "engine/cpu/slice_geometry.h"

#include "engine/cpu/strided_loop.h"
#include "formats/error.h"
#include "formats/slice_range.h"

namespace piper::engine::cpu {

std::vector<TensorView> check_slice(const KernelArgs& args) {
  args.expect_inputs(3, 5);
  args.expect_outputs(1, 1);
  args.expect_dtype(args.input(0), args.output(0).dtype, "input 0");
  std::vector<TensorView> views;
  for (size_t i = 1; i < 5; ++i) {
    if (!args.has_input(i)) {
      views.emplace_back();
      continue;
    }
    const TensorView& view = args.input(i);
    args.expect_dtype(view, plan::INT64, "input " + std::to_string(i));
    if (view.rank() != 1) {
      args.fail("input " + std::to_string(i) + " must be 1-D, got " + shape_string(view.shape));
    }
    views.push_back(view);
  }
  return views;
}

SliceParameters slice_parameters(const std::vector<TensorView>& views,
                                 const std::vector<std::vector<int64_t>>& values) {
  SliceParameters parameters{values[0], values[1], std::nullopt, std::nullopt};
  if (views[2].present()) parameters.axes = values[2];
  if (views[3].present()) parameters.steps = values[3];
  return parameters;
}

SliceGeometry slice_geometry(const std::string& op, const SliceParameters& parameters,
                             const Shape& data, const Shape& sliced) {
  const auto fail = [&](const std::string& message) { throw Error(op + ": " + message); };
  const std::vector<int64_t>& starts = parameters.starts;
  const std::vector<int64_t>& ends = parameters.ends;
  const size_t n = starts.size();
  const int64_t rank = static_cast<int64_t>(data.size());
  std::vector<int64_t> axes(n);
  if (parameters.axes) {
    axes = *parameters.axes;
  } else {
    for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
  }
  const std::vector<int64_t> steps = parameters.steps.value_or(std::vector<int64_t>(n, 1));
  if (ends.size() != n || axes.size() != n || steps.size() != n) {
    fail("starts, ends, axes and steps must have the same length");
  }
  if (static_cast<int64_t>(sliced.size()) != rank) {
    fail("the sliced tensor " + shape_string(sliced) + " must have the data's rank (" +
         shape_string(data) + ")");
  }
  std::vector<int64_t> begin(rank, 0), step(rank, 1);
  Shape count = data;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < n; ++i) {
    const int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (axis < 0 || axis >= rank || seen[axis]) {
      fail("axes entry " + std::to_string(axes[i]) + " is out of range or repeated");
    }
    seen[axis] = true;
    if (steps[i] == 0) fail("steps must not be 0");
    const formats::SliceRange range =
        formats::slice_range(starts[i], ends[i], steps[i], data[axis]);
    begin[axis] = range.begin;
    step[axis] = steps[i];
    count[axis] = range.count;
  }
  if (count != sliced) {
    fail("slicing " + shape_string(data) + " gives " + shape_string(count) +
         " but the sliced tensor has shape " + shape_string(sliced));
  }
  const std::vector<int64_t> strides = contiguous_strides(data);
  SliceGeometry geometry;
  geometry.strides.resize(rank);
  for (int64_t d = 0; d < rank; ++d) {
    geometry.base += begin[d] * strides[d];
    geometry.strides[d] = step[d] * strides[d];
  }
  return geometry;
}

}  // namespace piper::engine::cpu
