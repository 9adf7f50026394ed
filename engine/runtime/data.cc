#include "engine/runtime/data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>

#include "formats/error.h"
#include "formats/npy.h"

namespace piper::engine {
namespace {

// What the plan expects of one graph input: dtype and the shape of one sample.
struct InputSpec {
  std::string name;
  plan::DType dtype = plan::FLOAT32;
  Shape row_shape;
  int64_t int_high = 0;
};

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
  }
}

// Every graph input the plan reads: those it feeds rows of and those whose labels it counts.
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
    add_spec(specs, {input.input(), tensor.dtype(),
                     Shape(tensor.shape().begin() + 1, tensor.shape().end()), input.int_high()});
  }
  // A rank counts the labels of the whole step, also where it feeds none of their rows.
  for (const auto& count : plan.label_counts()) {
    add_spec(specs,
             {count.input(), plan::INT64,
              Shape(count.sample_shape().begin(), count.sample_shape().end()), count.int_high()});
  }
  if (!specs.empty() && plan.global_batch() <= 0) {
    throw Error("the plan has batch inputs but global_batch is " +
                std::to_string(plan.global_batch()));
  }
  return specs;
}

// "[samples, 32]" for samples of shape [32].
std::string sample_shape_string(const Shape& row_shape) {
  std::string text = "[samples";
  for (int64_t dim : row_shape) text += ", " + std::to_string(dim);
  return text + "]";
}

plan::DType plan_dtype(formats::NpyDType dtype) {
  switch (dtype) {
    case formats::NpyDType::kFloat32:
      return plan::FLOAT32;
    case formats::NpyDType::kInt64:
      return plan::INT64;
    case formats::NpyDType::kBool:
      return plan::BOOL;
  }
  throw Error("unknown .npy dtype");
}

HostTensor empty_batch(const InputSpec& spec, int64_t rows) {
  HostTensor tensor;
  tensor.dtype = spec.dtype;
  tensor.shape = {rows};
  tensor.shape.insert(tensor.shape.end(), spec.row_shape.begin(), spec.row_shape.end());
  tensor.data.resize(static_cast<size_t>(num_elements(tensor.shape)) * dtype_size(spec.dtype));
  return tensor;
}

class NpySource : public BatchSource {
 public:
  NpySource(const plan::Plan& plan, const std::string& directory)
      : directory_(directory), global_batch_(plan.global_batch()) {
    for (const InputSpec& spec : input_specs(plan)) {
      const std::string path = (std::filesystem::path(directory) / (spec.name + ".npy")).string();
      if (!std::filesystem::exists(path)) {
        throw Error("--data: '" + path + "' is missing; the plan's input '" + spec.name +
                    "' needs it (" + dtype_name(spec.dtype) + ", shape " +
                    sample_shape_string(spec.row_shape) + ")");
      }
      formats::NpyArray array = formats::read_npy(path);
      const plan::DType dtype = plan_dtype(array.dtype);
      if (dtype != spec.dtype) {
        throw Error("'" + path + "' holds " + dtype_name(dtype) + " but the plan's input '" +
                    spec.name + "' is " + dtype_name(spec.dtype));
      }
      const Shape trailing =
          array.shape.empty() ? Shape{} : Shape(array.shape.begin() + 1, array.shape.end());
      if (array.shape.empty() || trailing != spec.row_shape) {
        throw Error("'" + path + "' has shape " + shape_string(array.shape) +
                    " but the plan's input '" + spec.name + "' needs shape " +
                    sample_shape_string(spec.row_shape));
      }
      if (array.shape[0] == 0) {
        throw Error("'" + path + "' holds no samples");
      }
      if (!arrays_.empty() && array.shape[0] != arrays_.front().second.shape[0]) {
        throw Error("'" + path + "' holds " + std::to_string(array.shape[0]) + " samples but '" +
                    first_path_ + "' holds " + std::to_string(arrays_.front().second.shape[0]) +
                    "; the files of --data pair up row by row, so they need the same number "
                    "of samples");
      }
      if (arrays_.empty()) first_path_ = path;
      arrays_.emplace_back(spec, std::move(array));
    }
  }

  Batch batch(int64_t step) override {
    Batch batch;
    for (const auto& [spec, array] : arrays_) {
      HostTensor tensor = empty_batch(spec, global_batch_);
      const int64_t samples = array.shape[0];
      const size_t row_bytes = array.data.size() / static_cast<size_t>(samples);
      const int64_t first = (step % samples) * (global_batch_ % samples) % samples;
      for (int64_t i = 0; i < global_batch_; ++i) {
        const int64_t row = (first + i) % samples;
        std::memcpy(tensor.data.data() + i * row_bytes, array.data.data() + row * row_bytes,
                    row_bytes);
      }
      batch.emplace(spec.name, std::move(tensor));
    }
    return batch;
  }

  std::string describe() const override { return "data from " + directory_; }

 private:
  std::string directory_;
  std::string first_path_;
  int64_t global_batch_;
  std::vector<std::pair<InputSpec, formats::NpyArray>> arrays_;
};

// splitmix64: a small, well-mixed generator; enough for synthetic data.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1].
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

uint64_t mix(uint64_t a, uint64_t b) { return SplitMix64(a ^ (b * 0xd1b54a32d192ed03ull)).next(); }

class SyntheticSource : public BatchSource {
 public:
  SyntheticSource(const plan::Plan& plan, uint64_t seed)
      : specs_(input_specs(plan)), global_batch_(plan.global_batch()), seed_(seed) {
    for (const auto& spec : specs_) {
      if (spec.dtype != plan::FLOAT32 && spec.dtype != plan::INT64 && spec.dtype != plan::BOOL) {
        throw Error("plan input '" + spec.name + "' is " + dtype_name(spec.dtype) +
                    "; synthetic data covers float32, int64 and bool inputs, pass --data");
      }
    }
  }

  Batch batch(int64_t step) override {
    Batch batch;
    for (const InputSpec& spec : specs_) {
      HostTensor tensor = empty_batch(spec, global_batch_);
      SplitMix64 rng(mix(mix(seed_, fnv1a(spec.name)), static_cast<uint64_t>(step)));
      const int64_t n = num_elements(tensor.shape);
      if (spec.dtype == plan::FLOAT32) {
        auto* out = reinterpret_cast<float*>(tensor.data.data());
        for (int64_t i = 0; i < n; i += 2) {  // Box-Muller: two normals per pair of uniforms
          const double radius = std::sqrt(-2.0 * std::log(rng.uniform()));
          const double angle = 2.0 * std::numbers::pi * rng.uniform();
          out[i] = static_cast<float>(radius * std::cos(angle));
          if (i + 1 < n) out[i + 1] = static_cast<float>(radius * std::sin(angle));
        }
      } else if (spec.dtype == plan::BOOL) {  // fair coin flips
        for (int64_t i = 0; i < n; ++i)
          tensor.data[static_cast<size_t>(i)] = static_cast<uint8_t>(rng.next() >> 63);
      } else {
        auto* out = reinterpret_cast<int64_t*>(tensor.data.data());
        const auto high = static_cast<uint64_t>(spec.int_high);
        for (int64_t i = 0; i < n; ++i) {
          out[i] = high > 0 ? static_cast<int64_t>(rng.next() % high) : 0;
        }
      }
      batch.emplace(spec.name, std::move(tensor));
    }
    return batch;
  }

  std::string describe() const override {
    return "synthetic data (seed " + std::to_string(seed_) + ")";
  }

 private:
  std::vector<InputSpec> specs_;
  int64_t global_batch_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<BatchSource> make_npy_source(const plan::Plan& plan, const std::string& directory) {
  if (!std::filesystem::is_directory(directory)) {
    throw Error("--data: '" + directory + "' is not a directory of NAME.npy files");
  }
  return std::make_unique<NpySource>(plan, directory);
}

std::unique_ptr<BatchSource> make_synthetic_source(const plan::Plan& plan, uint64_t seed) {
  return std::make_unique<SyntheticSource>(plan, seed);
}

}  // namespace piper::engine
