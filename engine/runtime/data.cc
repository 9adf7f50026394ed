#include "engine/runtime/data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <set>

#include "engine/runtime/data_inputs.h"
#include "engine/runtime/token_data.h"
#include "formats/error.h"
#include "formats/npy.h"

namespace piper::engine {
namespace {

std::string npy_path(const std::string& directory, const std::string& input) {
  return (std::filesystem::path(directory) / (input + ".npy")).string();
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

// Each file is mapped (formats::MappedNpy) and only the rows this rank reads are copied out;
// their pages are released from the resident set again, so memory does not grow with the
// data set.
class NpySource : public BatchSource {
 public:
  // Feeds every plan input but those in `skip` (fed from elsewhere, see make_batch_source).
  NpySource(const plan::Plan& plan, const std::string& directory,
            const std::set<std::string>& skip = {})
      : directory_(directory), global_batch_(plan.global_batch()) {
    for (const InputSpec& spec : input_specs(plan)) {
      if (skip.count(spec.name)) continue;
      const std::string path = npy_path(directory, spec.name);
      if (!std::filesystem::exists(path)) {
        throw Error("--data: '" + path + "' is missing; the plan's input '" + spec.name +
                    "' needs it (" + dtype_name(spec.dtype) + ", shape " +
                    sample_shape_string(spec.row_shape) + ")");
      }
      auto array = std::make_unique<formats::MappedNpy>(path);
      const std::vector<int64_t>& shape = array->header.shape;
      const plan::DType dtype = plan_dtype(array->header.dtype);
      if (dtype != spec.dtype) {
        throw Error("'" + path + "' holds " + dtype_name(dtype) + " but the plan's input '" +
                    spec.name + "' is " + dtype_name(spec.dtype));
      }
      const Shape trailing = shape.empty() ? Shape{} : Shape(shape.begin() + 1, shape.end());
      if (shape.empty() || trailing != spec.row_shape) {
        throw Error("'" + path + "' has shape " + shape_string(shape) + " but the plan's input '" +
                    spec.name + "' needs shape " + sample_shape_string(spec.row_shape));
      }
      if (shape[0] == 0) {
        throw Error("'" + path + "' holds no samples");
      }
      if (!arrays_.empty() && shape[0] != samples()) {
        throw Error("'" + path + "' holds " + std::to_string(shape[0]) + " samples but '" +
                    first_path_ + "' holds " + std::to_string(samples()) +
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
      const int64_t samples = array->header.shape[0];
      const std::string_view data = array->data();
      const size_t row_bytes = data.size() / static_cast<size_t>(samples);
      const int64_t first = (step % samples) * (global_batch_ % samples) % samples;
      // Consecutive rows lie side by side in the file: release each run of them at once.
      int64_t run_begin = -1, run_end = -1;
      auto release = [&, &array = array] {
        if (run_begin < 0) return;
        array->file.release(array->header.data_offset + run_begin * row_bytes,
                            (run_end - run_begin) * row_bytes);
      };
      for_each_row(spec, [&](int64_t i) {
        const int64_t row = (first + i) % samples;
        std::memcpy(tensor.data.data() + i * row_bytes, data.data() + row * row_bytes, row_bytes);
        if (row != run_end) {
          release();
          run_begin = row;
        }
        run_end = row + 1;
      });
      release();
      batch.emplace(spec.name, std::move(tensor));
    }
    return batch;
  }

  std::string describe() const override { return "data from " + directory_; }

 private:
  int64_t samples() const { return arrays_.front().second->header.shape[0]; }

  std::string directory_;
  std::string first_path_;
  int64_t global_batch_;
  std::vector<std::pair<InputSpec, std::unique_ptr<formats::MappedNpy>>> arrays_;
};

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

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

void check_data_directory(const std::string& directory) {
  if (!std::filesystem::is_directory(directory)) {
    throw Error("--data: '" + directory + "' is not a directory of NAME.npy files");
  }
}

// Token windows for some inputs, .npy rows for the rest.
class MergedSource : public BatchSource {
 public:
  MergedSource(std::unique_ptr<BatchSource> tokens, std::unique_ptr<BatchSource> rest)
      : tokens_(std::move(tokens)), rest_(std::move(rest)) {}
  Batch batch(int64_t step) override {
    Batch batch = tokens_->batch(step);
    batch.merge(rest_->batch(step));
    return batch;
  }
  std::string describe() const override {
    return tokens_->describe() + " and " + rest_->describe();
  }
  std::optional<formats::TokenStream> token_stream() const override {
    return tokens_->token_stream();
  }

 private:
  std::unique_ptr<BatchSource> tokens_, rest_;
};

}  // namespace

std::unique_ptr<BatchSource> make_npy_source(const plan::Plan& plan, const std::string& directory) {
  check_data_directory(directory);
  return std::make_unique<NpySource>(plan, directory);
}

std::unique_ptr<BatchSource> make_batch_source(const plan::Plan& plan, const DataOptions& options) {
  if (!options.tokens) {
    return options.data_dir ? make_npy_source(plan, *options.data_dir)
                            : make_synthetic_source(plan, options.seed);
  }
  std::set<std::string> token_inputs;
  for (const TokenInput& input : options.tokens->inputs) token_inputs.insert(input.input);
  if (options.data_dir) check_data_directory(*options.data_dir);
  std::set<std::string> rest;
  for (const InputSpec& spec : input_specs(plan)) {
    if (!token_inputs.count(spec.name)) {
      rest.insert(spec.name);
      continue;
    }
    if (options.data_dir && std::filesystem::exists(npy_path(*options.data_dir, spec.name))) {
      throw Error("--tokens and --data both feed the plan's input '" + spec.name +
                  "': --token-inputs names it and --data " + *options.data_dir + " holds " +
                  npy_path(*options.data_dir, spec.name) + "; drop it from one of them");
    }
  }
  auto tokens = make_token_source(plan, *options.tokens, options.seed);
  if (rest.empty()) return tokens;
  if (!options.data_dir) {
    throw Error("--tokens feeds only the inputs --token-inputs names, but the plan also reads '" +
                *rest.begin() +
                "'; add it to --token-inputs, or give its NAME.npy with --data DIR");
  }
  return std::make_unique<MergedSource>(
      std::move(tokens), std::make_unique<NpySource>(plan, *options.data_dir, token_inputs));
}

std::unique_ptr<BatchSource> make_synthetic_source(const plan::Plan& plan, uint64_t seed) {
  return std::make_unique<SyntheticSource>(plan, seed);
}

}  // namespace piper::engine
