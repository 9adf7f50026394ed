#include "engine/runtime/label_count.h"

#include <cstring>

#include "formats/error.h"

namespace piper::engine {
namespace {

// The offsets, in entries from the start of a sample, of the entries `count` counts.
std::vector<int64_t> counted_offsets(const plan::LabelCount& count, const Shape& sample) {
  const int64_t entries = num_elements(sample);
  if (entries == 0) return {};
  if (count.window().empty()) {
    std::vector<int64_t> all(static_cast<size_t>(entries));
    for (int64_t i = 0; i < entries; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }
  if (count.window_size() != static_cast<int>(sample.size())) {
    throw Error("the label count of '" + count.input() + "' has " +
                std::to_string(count.window_size()) + " window dimensions for samples of shape " +
                shape_string(sample));
  }
  std::vector<int64_t> offsets = {0};
  int64_t stride = entries;
  for (int d = 0; d < count.window_size(); ++d) {
    const plan::CountWindow& window = count.window(d);
    const int64_t extent = sample[static_cast<size_t>(d)];
    stride /= extent;
    const int64_t last = window.start() + (window.count() - 1) * window.step();
    const auto inside = [extent](int64_t index) { return index >= 0 && index < extent; };
    if (window.count() < 0 || (window.count() > 0 && !(inside(window.start()) && inside(last)))) {
      throw Error("the label count of '" + count.input() + "' has a window outside dimension " +
                  std::to_string(d) + " of samples of shape " + shape_string(sample));
    }
    std::vector<int64_t> next;
    for (int64_t offset : offsets) {
      for (int64_t k = 0; k < window.count(); ++k) {
        next.push_back(offset + (window.start() + k * window.step()) * stride);
      }
    }
    offsets = std::move(next);
  }
  return offsets;
}

}  // namespace

float count_labels(const plan::LabelCount& count, const Batch& batch) {
  const auto found = batch.find(count.input());
  const Shape sample(count.sample_shape().begin(), count.sample_shape().end());
  if (found == batch.end() || found->second.dtype != plan::INT64 || found->second.shape.empty() ||
      Shape(found->second.shape.begin() + 1, found->second.shape.end()) != sample) {
    throw Error("the plan counts the labelled entries of batch input '" + count.input() +
                "', int64 with samples of shape " + shape_string(sample) + ", but the batch " +
                (found == batch.end() ? std::string("has no such input")
                                      : "holds it as " + dtype_name(found->second.dtype) + " " +
                                            shape_string(found->second.shape)));
  }
  const HostTensor& labels = found->second;
  const int64_t entries = num_elements(sample);
  if (labels.data.size() < static_cast<size_t>(labels.shape[0] * entries) * sizeof(int64_t)) {
    throw Error("batch input '" + count.input() + "' holds fewer bytes than its shape " +
                shape_string(labels.shape) + " needs");
  }
  const std::vector<int64_t> offsets = counted_offsets(count, sample);
  int64_t labelled = 0;
  for (int64_t row = 0; row < labels.shape[0]; ++row) {
    for (int64_t offset : offsets) {
      int64_t label = 0;
      std::memcpy(&label, labels.data.data() + (row * entries + offset) * sizeof(int64_t),
                  sizeof label);
      labelled += label != count.ignore_index();
    }
  }
  return static_cast<float>(labelled);
}

}  // namespace piper::engine
