// Helpers for the engine's unit tests: run one CPU kernel on host buffers,
// build plan attributes, compare float vectors with a labelled tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/backend.h"
#include "formats/build_info.h"
#include "formats/plan_file.h"
#include "schemas/plan.pb.h"

namespace piper::engine::testing {

inline plan::Attribute Int(const std::string& name, int64_t value) {
  plan::Attribute attribute;
  attribute.set_name(name);
  attribute.set_i(value);
  return attribute;
}

inline plan::Attribute Float(const std::string& name, double value) {
  plan::Attribute attribute;
  attribute.set_name(name);
  attribute.set_f(value);
  return attribute;
}

inline plan::Attribute Str(const std::string& name, const std::string& value) {
  plan::Attribute attribute;
  attribute.set_name(name);
  attribute.set_s(value);
  return attribute;
}

inline plan::Attribute Ints(const std::string& name, const std::vector<int64_t>& values) {
  plan::Attribute attribute;
  attribute.set_name(name);
  attribute.mutable_ints();  // an empty list is still an ints attribute
  for (int64_t value : values) attribute.mutable_ints()->add_values(value);
  return attribute;
}

inline plan::Kernel MakeKernel(const std::string& op, const std::vector<int>& inputs,
                               const std::vector<int>& outputs,
                               const std::vector<plan::Attribute>& attributes = {}) {
  plan::Kernel kernel;
  kernel.set_op_type(op);
  for (int index : inputs) kernel.add_inputs(index);
  for (int index : outputs) kernel.add_outputs(index);
  for (const auto& attribute : attributes) *kernel.add_attributes() = attribute;
  return kernel;
}

// Expects |actual - expected| <= atol + rtol * |expected| everywhere; on failure reports the
// largest difference, where it is, and `label`.
inline void ExpectNear(const std::vector<float>& actual, const std::vector<double>& expected,
                       double atol, const std::string& label, double rtol = 0.0) {
  ASSERT_EQ(actual.size(), expected.size()) << label << ": sizes differ";
  double worst = 0.0;
  size_t worst_at = 0;
  bool ok = true;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::abs(static_cast<double>(actual[i]) - expected[i]);
    const bool same_nan = std::isnan(actual[i]) && std::isnan(expected[i]);
    if (!same_nan && (std::isnan(diff) || diff > atol + rtol * std::abs(expected[i]))) ok = false;
    if (!same_nan && (std::isnan(diff) || diff > worst)) {
      worst = diff;
      worst_at = i;
    }
  }
  EXPECT_TRUE(ok) << label << ": largest difference " << worst << " at element " << worst_at
                  << " (actual " << actual[worst_at] << ", expected " << expected[worst_at]
                  << "), tolerance " << atol << " + " << rtol << " * |expected|";
}

inline std::vector<double> ToDouble(const std::vector<float>& values) {
  return {values.begin(), values.end()};
}

// Tensors in host memory for running single kernels of the CPU backend.
class KernelRunner {
 public:
  static constexpr int kOmitted = -1;

  int Input(const Shape& shape, const std::vector<float>& values) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), num_elements(shape));
    return Add(plan::FLOAT32, shape, values.data(), values.size() * sizeof(float));
  }
  int IntInput(const Shape& shape, const std::vector<int64_t>& values) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), num_elements(shape));
    return Add(plan::INT64, shape, values.data(), values.size() * sizeof(int64_t));
  }
  int BoolInput(const Shape& shape, const std::vector<uint8_t>& values) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), num_elements(shape));
    return Add(plan::BOOL, shape, values.data(), values.size());
  }
  int Output(const Shape& shape, plan::DType dtype = plan::FLOAT32) {
    return Add(dtype, shape, nullptr, 0);
  }

  void Set(int index, const std::vector<float>& values) {
    ASSERT_EQ(values.size() * sizeof(float), views_[index].bytes());
    std::memcpy(views_[index].data, values.data(), views_[index].bytes());
  }
  std::vector<float> Floats(int index) const {
    const float* data = views_[index].as<const float>();
    return {data, data + views_[index].elements()};
  }
  int64_t* Int64Data(int index) const { return views_[index].as<int64_t>(); }
  std::vector<int64_t> Int64s(int index) const {
    const int64_t* data = views_[index].as<const int64_t>();
    return {data, data + views_[index].elements()};
  }
  std::vector<uint8_t> Bools(int index) const {
    const uint8_t* data = views_[index].as<const uint8_t>();
    return {data, data + views_[index].elements()};
  }

  std::unique_ptr<PreparedKernel> Prepare(const std::string& op, const std::vector<int>& inputs,
                                          const std::vector<int>& outputs,
                                          const std::vector<plan::Attribute>& attributes = {}) {
    kernel_ = MakeKernel(op, inputs, outputs, attributes);
    return backend_.prepare(kernel_, Views(inputs), Views(outputs));
  }

  // Prepares a kernel built by the caller (fields MakeKernel does not set).
  std::unique_ptr<PreparedKernel> Prepare(plan::Kernel kernel) {
    kernel_ = std::move(kernel);
    return backend_.prepare(kernel_, Views({kernel_.inputs().begin(), kernel_.inputs().end()}),
                            Views({kernel_.outputs().begin(), kernel_.outputs().end()}));
  }

  // Prepares and runs once with the given 1-based step.
  void Run(const std::string& op, const std::vector<int>& inputs, const std::vector<int>& outputs,
           const std::vector<plan::Attribute>& attributes = {}, int64_t step = 1) {
    Prepare(op, inputs, outputs, attributes)->run(StepContext{step, 0, step});
  }

  cpu::CpuBackend& backend() { return backend_; }

 private:
  struct Buffer {
    cpu::CpuBackend* backend;
    void* data;
    ~Buffer() { backend->release(data); }
  };

  int Add(plan::DType dtype, const Shape& shape, const void* data, size_t bytes) {
    TensorView view{nullptr, dtype, shape};
    view.data = backend_.allocate(view.bytes());
    buffers_.push_back(std::unique_ptr<Buffer>(new Buffer{&backend_, view.data}));
    if (data != nullptr) std::memcpy(view.data, data, bytes);
    views_.push_back(view);
    return static_cast<int>(views_.size()) - 1;
  }

  std::vector<TensorView> Views(const std::vector<int>& indices) const {
    std::vector<TensorView> views;
    for (int index : indices) views.push_back(index == kOmitted ? TensorView{} : views_[index]);
    return views;
  }

  cpu::CpuBackend backend_;
  plan::Kernel kernel_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<TensorView> views_;
};

// Deterministic pseudo-random floats in [-1, 1) for test inputs.
inline std::vector<float> TestValues(int64_t count, uint32_t seed = 1) {
  std::vector<float> values(static_cast<size_t>(count));
  uint32_t state = seed * 2654435761u + 12345u;
  for (auto& value : values) {
    state = state * 1664525u + 1013904223u;
    value = static_cast<float>((state >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
  }
  return values;
}

// Multi-index helpers for naive reference implementations.
inline std::vector<int64_t> Unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// The flat offset in a tensor of `shape` read at output index `out_index` under numpy
// broadcasting (right-aligned; size-1 dimensions repeat).
inline int64_t BroadcastOffset(const std::vector<int64_t>& out_index, const Shape& shape) {
  int64_t offset = 0;
  const size_t lead = out_index.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    offset = offset * shape[d] + (shape[d] == 1 ? 0 : out_index[lead + d]);
  }
  return offset;
}

// Builds small plans by hand: tensors packed into the arena in order, streams of kernels
// and events.
class PlanBuilder {
 public:
  PlanBuilder() {
    plan_.mutable_header()->set_format_version(formats::kPlanFormatVersion);
    plan_.mutable_header()->set_planner_version(formats::piper_build_id());
    plan_.mutable_header()->set_world_size(1);
    plan_.mutable_header()->set_plan_id("test");
  }

  int Tensor(const std::string& name, const Shape& shape, plan::DType dtype = plan::FLOAT32,
             plan::Role role = plan::ACTIVATION) {
    plan::Tensor* tensor = plan_.add_tensors();
    tensor->set_name(name);
    tensor->set_dtype(dtype);
    for (int64_t dim : shape) tensor->add_shape(dim);
    tensor->set_role(role);
    tensor->set_offset(next_offset_);
    tensor->set_bytes(static_cast<uint64_t>(num_elements(shape)) * dtype_size(dtype));
    next_offset_ += (tensor->bytes() + 63) / 64 * 64;
    return plan_.tensors_size() - 1;
  }

  // Instructions append to the stream named `stream`, created on first use.
  void Kernel(const std::string& stream, const std::string& op, const std::vector<int>& inputs,
              const std::vector<int>& outputs, const std::vector<plan::Attribute>& attributes = {},
              const std::string& label = "") {
    plan::Instruction* instruction = Stream(stream)->add_instructions();
    *instruction->mutable_kernel() = MakeKernel(op, inputs, outputs, attributes);
    instruction->set_label(label.empty() ? op : label);
  }
  void Record(const std::string& stream, int event) {
    Stream(stream)->add_instructions()->mutable_record()->set_event(event);
    num_events_ = std::max(num_events_, event + 1);
  }
  void Wait(const std::string& stream, int event) {
    Stream(stream)->add_instructions()->mutable_wait()->set_event(event);
    num_events_ = std::max(num_events_, event + 1);
  }

  void Input(const std::string& input, int tensor, int64_t offset, int64_t samples,
             int64_t int_high = 0) {
    plan::BatchInput* batch_input = plan_.add_inputs();
    batch_input->set_input(input);
    batch_input->set_tensor(tensor);
    batch_input->set_sample_offset(offset);
    batch_input->set_samples(samples);
    batch_input->set_int_high(int_high);
  }
  void Loss(int tensor, double weight = 1.0) {
    plan::LossTerm* term = plan_.add_loss();
    term->set_tensor(tensor);
    term->set_weight(weight);
  }
  void Parameter(const std::string& initializer, int tensor) {
    plan::ParameterLoad* load = plan_.add_parameters();
    load->set_initializer(initializer);
    load->set_tensor(tensor);
  }
  template <typename T>
  void Constant(int tensor, const std::vector<T>& values) {
    plan::ConstantValue* constant = plan_.add_constants();
    constant->set_tensor(tensor);
    constant->set_data(values.data(), values.size() * sizeof(T));
  }

  plan::Plan& plan() { return plan_; }
  plan::Plan Build() {
    plan::Plan result = plan_;
    result.mutable_memory()->set_arena_bytes(next_offset_);
    if (result.num_events() == 0) result.set_num_events(num_events_);
    return result;
  }

 private:
  plan::Stream* Stream(const std::string& name) {
    for (auto& stream : *plan_.mutable_streams()) {
      if (stream.name() == name) return &stream;
    }
    plan::Stream* stream = plan_.add_streams();
    stream->set_name(name);
    return stream;
  }

  plan::Plan plan_;
  uint64_t next_offset_ = 0;
  int num_events_ = 0;
};

}  // namespace piper::engine::testing
