#include "engine/runtime/data_inputs.h"

#include <algorithm>

#include "formats/error.h"

namespace piper::engine {
namespace {

void add_spec(std::vector<InputSpec>& specs, const InputSpec& spec) {
  auto same = std::find_if(specs.begin(), specs.end(),
                           [&](const InputSpec& s) { return s.name == spec.name; });
  if (same == specs.end()) {
    specs.push_back(spec);
  } else if (same->dtype != spec.dtype || same->row_shape != spec.row_shape) {
    throw Error("plan input '" + spec.name + "' is fed to tensors of different dtype or sample " +
                "shape (" + dtype_name(same->dtype) + " " + shape_string(same->row_shape) + " vs " +
                dtype_name(spec.dtype) + " " + shape_string(spec.row_shape) + ")");
  } else {
    same->int_high = std::max(same->int_high, spec.int_high);
    same->rows.insert(same->rows.end(), spec.rows.begin(), spec.rows.end());
  }
}

void merge_rows(std::vector<std::pair<int64_t, int64_t>>& rows) {
  std::sort(rows.begin(), rows.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& range : rows) {
    if (!merged.empty() && range.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, range.second);
    } else {
      merged.push_back(range);
    }
  }
  rows = std::move(merged);
}

}  // namespace

std::vector<InputSpec> input_specs(const plan::Plan& plan) {
  std::vector<InputSpec> specs;
  for (const auto& input : plan.inputs()) {
    if (input.tensor() < 0 || input.tensor() >= plan.tensors_size()) {
      throw Error("plan input '" + input.input() + "' refers to tensor " +
                  std::to_string(input.tensor()) + " but the plan has " +
                  std::to_string(plan.tensors_size()) + " tensors");
    }
    const plan::Tensor& tensor = plan.tensors(input.tensor());
    if (tensor.shape_size() == 0) {
      throw Error("plan input '" + input.input() + "' (tensor '" + tensor.name() +
                  "') is a scalar; batch inputs need a leading sample dimension");
    }
    const int64_t begin = std::clamp<int64_t>(input.sample_offset(), 0, plan.global_batch());
    const int64_t end =
        std::clamp<int64_t>(input.sample_offset() + input.samples(), begin, plan.global_batch());
    add_spec(specs, {input.input(),
                     tensor.dtype(),
                     Shape(tensor.shape().begin() + 1, tensor.shape().end()),
                     input.int_high(),
                     {{begin, end}}});
  }
  // A rank counts the labels of the whole step, also where it feeds none of their rows.
  for (const auto& count : plan.label_counts()) {
    add_spec(specs, {count.input(),
                     plan::INT64,
                     Shape(count.sample_shape().begin(), count.sample_shape().end()),
                     count.int_high(),
                     {{0, plan.global_batch()}}});
  }
  if (!specs.empty() && plan.global_batch() <= 0) {
    throw Error("the plan has batch inputs but global_batch is " +
                std::to_string(plan.global_batch()));
  }
  for (InputSpec& spec : specs) merge_rows(spec.rows);
  return specs;
}

std::string sample_shape_string(const Shape& row_shape) {
  std::string text = "[samples";
  for (int64_t dim : row_shape) text += ", " + std::to_string(dim);
  return text + "]";
}

HostTensor empty_batch(const InputSpec& spec, int64_t rows) {
  HostTensor tensor;
  tensor.dtype = spec.dtype;
  tensor.shape = {rows};
  tensor.shape.insert(tensor.shape.end(), spec.row_shape.begin(), spec.row_shape.end());
  tensor.data.resize(static_cast<size_t>(num_elements(tensor.shape)) * dtype_size(spec.dtype));
  return tensor;
}

}  // namespace piper::engine
