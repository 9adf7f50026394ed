// Rules for the ops that move elements without computing: Gather, Unsqueeze, Squeeze,
// Concat, Reshape, Slice, Transpose, Expand, Tile, Identity. Each checks what a malformed
// model could get wrong (axes, indices, shapes) before it reads an element.
#include <algorithm>
#include <numeric>

#include "formats/error.h"
#include "formats/slice_range.h"
#include "planner/import/fold_rules.h"

namespace piper::planner::fold {
namespace {

int64_t rank_of(const ConstantValue& value) { return static_cast<int64_t>(value.shape.size()); }

// A value of `shape` whose element at each multi-index is source's element `source_of(index)`.
template <typename SourceOf>
ConstantValue gather_elements(const ConstantValue& source, std::vector<int64_t> shape,
                              SourceOf source_of) {
  std::vector<int64_t> flat;
  flat.reserve(static_cast<size_t>(checked_product(shape)));
  for_each_index(shape,
                 [&](const std::vector<int64_t>& index) { flat.push_back(source_of(index)); });
  return take(source, flat, std::move(shape));
}

std::optional<ConstantValue> fold_identity(const onnx::NodeProto&, const Inputs& in) {
  return input(in, 0);
}

std::optional<ConstantValue> fold_gather(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue& data = input(in, 0);
  if (data.shape.empty()) throw Error("data must have rank 1 or more");
  const int64_t axis = normalize_axis(int_attr(node, "axis", 0), rank_of(data));
  const int64_t dim = data.shape[axis];
  std::vector<int64_t> indices = int_elements(input(in, 1), "indices");
  for (int64_t& index : indices) {
    if (index < -dim || index >= dim) {
      throw Error("index " + std::to_string(index) + " is out of range for axis " +
                  std::to_string(axis) + " of size " + std::to_string(dim));
    }
    if (index < 0) index += dim;
  }
  std::vector<int64_t> shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), in[1]->shape.begin(), in[1]->shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  const auto strides = strides_of(data.shape);
  const auto index_rank = static_cast<int64_t>(in[1]->shape.size());
  const auto index_strides = strides_of(in[1]->shape);
  return gather_elements(data, shape, [&](const std::vector<int64_t>& at) {
    int64_t source = 0, position = 0;
    for (int64_t d = 0; d < axis; ++d) source += at[d] * strides[d];
    for (int64_t d = 0; d < index_rank; ++d) position += at[axis + d] * index_strides[d];
    source += indices[position] * strides[axis];
    for (int64_t d = axis + 1; d < rank_of(data); ++d)
      source += at[d + index_rank - 1] * strides[d];
    return source;
  });
}

// Squeeze's and Unsqueeze's axes: input 1 from opset 13, the attribute before.
std::vector<int64_t> listed_axes(const onnx::NodeProto& node, const Inputs& in) {
  if (in.size() > 1 && in[1]) return int_elements(*in[1], "axes");
  const auto* attr = find_attr(node, "axes");
  return attr ? std::vector<int64_t>(attr->ints().begin(), attr->ints().end())
              : std::vector<int64_t>{};
}

std::vector<int64_t> unique_axes(std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& axis : axes) axis = normalize_axis(axis, rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    throw Error("axes repeat an axis");
  }
  return axes;
}

std::optional<ConstantValue> fold_unsqueeze(const onnx::NodeProto& node, const Inputs& in) {
  ConstantValue out = input(in, 0);
  const auto listed = listed_axes(node, in);
  const auto rank = static_cast<int64_t>(out.shape.size() + listed.size());
  for (int64_t axis : unique_axes(listed, rank)) out.shape.insert(out.shape.begin() + axis, 1);
  return out;
}

std::optional<ConstantValue> fold_squeeze(const onnx::NodeProto& node, const Inputs& in) {
  ConstantValue out = input(in, 0);
  const auto axes = unique_axes(listed_axes(node, in), rank_of(out));
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < rank_of(out); ++d) {
    const bool listed = std::binary_search(axes.begin(), axes.end(), d);
    if (listed && out.shape[d] != 1) {
      throw Error("axis " + std::to_string(d) + " of " + shape_text(out.shape) +
                  " is not of size 1");
    }
    if (!(listed || (axes.empty() && out.shape[d] == 1))) shape.push_back(out.shape[d]);
  }
  out.shape = shape;
  return out;
}

std::optional<ConstantValue> fold_concat(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue& first = input(in, 0);
  const int64_t axis = normalize_axis(int_attr(node, "axis", 0), rank_of(first));
  std::vector<int64_t> shape = first.shape;
  shape[axis] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const ConstantValue& part = input(in, i);
    std::vector<int64_t> other = part.shape;
    if (other.size() == shape.size()) other[axis] = 0;
    if (other != shape || part.data_type != first.data_type) {
      throw Error("input " + std::to_string(i) + " " + shape_text(part.shape) +
                  " does not match input 0 " + shape_text(first.shape) + " off axis " +
                  std::to_string(axis));
    }
  }
  for (const auto* part : in) shape[axis] += part->shape[axis];
  // Element (..., a, ...) comes from the input whose range along the axis holds a.
  std::vector<size_t> owner;
  std::vector<int64_t> offset;
  std::vector<std::vector<int64_t>> strides;
  for (size_t i = 0; i < in.size(); ++i) {
    strides.push_back(strides_of(in[i]->shape));
    for (int64_t a = 0; a < in[i]->shape[axis]; ++a) {
      owner.push_back(i);
      offset.push_back(a);
    }
  }
  ConstantValue out;
  out.data_type = first.data_type;
  for_each_index(shape, [&](const std::vector<int64_t>& at) {
    const size_t part = owner[at[axis]];
    int64_t source = 0;
    for (size_t d = 0; d < at.size(); ++d) {
      source += (static_cast<int64_t>(d) == axis ? offset[at[axis]] : at[d]) * strides[part][d];
    }
    if (out.is_integer()) {
      out.ints.push_back(in[part]->ints[source]);
    } else {
      out.reals.push_back(in[part]->reals[source]);
    }
  });
  out.shape = shape;
  return out;
}

std::optional<ConstantValue> fold_reshape(const onnx::NodeProto& node, const Inputs& in) {
  ConstantValue out = input(in, 0);
  auto shape = int_elements(input(in, 1), "the shape input");
  const bool allow_zero = int_attr(node, "allowzero", 0) != 0;
  std::optional<size_t> inferred;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0 && !allow_zero) {
      if (d >= out.shape.size()) {
        throw Error("shape " + shape_text(shape) + " copies dimension " + std::to_string(d) +
                    " that the input " + shape_text(out.shape) + " lacks");
      }
      shape[d] = out.shape[d];
    } else if (shape[d] == -1 && !inferred) {
      inferred = d;
    } else if (shape[d] < 0) {
      throw Error("shape " + shape_text(shape) + " is not a valid target shape");
    }
  }
  const int64_t count = out.size();
  if (inferred) {
    shape[*inferred] = 1;
    const int64_t known = checked_product(shape);
    if (known == 0 || count % known != 0) {
      throw Error("cannot reshape " + shape_text(out.shape) + " to " +
                  shape_text(int_elements(*in[1], "the shape input")));
    }
    shape[*inferred] = count / known;
  }
  if (checked_product(shape) != count) {
    throw Error("cannot reshape " + shape_text(out.shape) + " (" + std::to_string(count) +
                " elements) to " + shape_text(shape));
  }
  out.shape = shape;
  return out;
}

std::optional<ConstantValue> fold_slice(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue& data = input(in, 0);
  const auto starts = int_elements(input(in, 1), "starts");
  const auto ends = int_elements(input(in, 2), "ends");
  std::vector<int64_t> axes(starts.size());
  std::iota(axes.begin(), axes.end(), 0);
  if (in.size() > 3 && in[3]) axes = int_elements(*in[3], "axes");
  std::vector<int64_t> steps(starts.size(), 1);
  if (in.size() > 4 && in[4]) steps = int_elements(*in[4], "steps");
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    throw Error("starts, ends, axes and steps must have the same length");
  }
  const int64_t rank = rank_of(data);
  std::vector<int64_t> begin(rank, 0), step(rank, 1), count(data.shape);
  std::vector<bool> seen(rank, false);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t axis = normalize_axis(axes[k], rank);
    if (seen[axis]) throw Error("axes repeat axis " + std::to_string(axis));
    seen[axis] = true;
    if (steps[k] == 0) throw Error("steps must not be 0");
    const auto range = formats::slice_range(starts[k], ends[k], steps[k], data.shape[axis]);
    begin[axis] = range.begin;
    step[axis] = steps[k];
    count[axis] = range.count;
  }
  const auto strides = strides_of(data.shape);
  return gather_elements(data, count, [&](const std::vector<int64_t>& at) {
    int64_t source = 0;
    for (int64_t d = 0; d < rank; ++d) source += (begin[d] + at[d] * step[d]) * strides[d];
    return source;
  });
}

std::optional<ConstantValue> fold_transpose(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue& data = input(in, 0);
  const int64_t rank = rank_of(data);
  std::vector<int64_t> perm(rank);
  std::iota(perm.rbegin(), perm.rend(), 0);
  if (const auto* attr = find_attr(node, "perm"))
    perm.assign(attr->ints().begin(), attr->ints().end());
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(rank);
  std::iota(identity.begin(), identity.end(), 0);
  if (sorted != identity) {
    throw Error("perm " + shape_text(perm) + " is not a permutation of rank " +
                std::to_string(rank));
  }
  std::vector<int64_t> shape(rank);
  for (int64_t d = 0; d < rank; ++d) shape[d] = data.shape[perm[d]];
  const auto strides = strides_of(data.shape);
  return gather_elements(data, shape, [&](const std::vector<int64_t>& at) {
    int64_t source = 0;
    for (int64_t d = 0; d < rank; ++d) source += at[d] * strides[perm[d]];
    return source;
  });
}

std::optional<ConstantValue> fold_expand(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue& data = input(in, 0);
  const auto shape = broadcast(data.shape, int_elements(input(in, 1), "the shape input")).shape;
  if (too_large(shape)) return std::nullopt;
  return take(data, broadcast_index(data.shape, shape), shape);
}

std::optional<ConstantValue> fold_tile(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue& data = input(in, 0);
  const auto repeats = int_elements(input(in, 1), "repeats");
  if (static_cast<int64_t>(repeats.size()) != rank_of(data)) {
    throw Error("repeats " + shape_text(repeats) + " must have one entry per dimension of " +
                shape_text(data.shape));
  }
  std::vector<int64_t> shape(data.shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (repeats[d] < 0) throw Error("repeats " + shape_text(repeats) + " must not be negative");
    if (__builtin_mul_overflow(data.shape[d], repeats[d], &shape[d])) {
      throw Error("tiling " + shape_text(data.shape) + " by " + shape_text(repeats) +
                  " overflows int64");
    }
  }
  if (too_large(shape)) return std::nullopt;
  const auto strides = strides_of(data.shape);
  return gather_elements(data, shape, [&](const std::vector<int64_t>& at) {
    int64_t source = 0;
    for (size_t d = 0; d < at.size(); ++d) source += at[d] % data.shape[d] * strides[d];
    return source;
  });
}

}  // namespace

std::vector<ConstantValue> fold_split(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue& data = input(in, 0);
  if (data.shape.empty()) throw Error("input must have rank 1 or more");
  const int64_t axis = normalize_axis(int_attr(node, "axis", 0), rank_of(data));
  const int64_t dim = data.shape[axis];
  const auto outputs = static_cast<int64_t>(node.output_size());
  std::vector<int64_t> sizes;
  if (in.size() > 1 && in[1]) {
    sizes = int_elements(*in[1], "split");
    if (static_cast<int64_t>(sizes.size()) != outputs) {
      throw Error("split has " + std::to_string(sizes.size()) + " sizes for " +
                  std::to_string(outputs) + " outputs");
    }
    if (std::any_of(sizes.begin(), sizes.end(), [](int64_t size) { return size < 0; }) ||
        std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != dim) {
      throw Error("split sizes must be non-negative and add up to axis " + std::to_string(axis) +
                  "'s " + std::to_string(dim));
    }
  } else {
    if (outputs == 0 || dim % outputs != 0) {
      throw Error("axis " + std::to_string(axis) + " of size " + std::to_string(dim) +
                  " does not split evenly into " + std::to_string(outputs) + " outputs");
    }
    sizes.assign(static_cast<size_t>(outputs), dim / outputs);
  }
  const auto strides = strides_of(data.shape);
  std::vector<ConstantValue> parts;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    std::vector<int64_t> shape = data.shape;
    shape[axis] = size;
    parts.push_back(gather_elements(data, shape, [&](const std::vector<int64_t>& at) {
      int64_t source = 0;
      for (size_t d = 0; d < at.size(); ++d) {
        source += (at[d] + (static_cast<int64_t>(d) == axis ? offset : 0)) * strides[d];
      }
      return source;
    }));
    offset += size;
  }
  return parts;
}

void add_layout_rules(Rules& rules) {
  rules["Identity"] = fold_identity;
  rules["Gather"] = fold_gather;
  rules["Unsqueeze"] = fold_unsqueeze;
  rules["Squeeze"] = fold_squeeze;
  rules["Concat"] = fold_concat;
  rules["Reshape"] = fold_reshape;
  rules["Slice"] = fold_slice;
  rules["Transpose"] = fold_transpose;
  rules["Expand"] = fold_expand;
  rules["Tile"] = fold_tile;
}

}  // namespace piper::planner::fold
