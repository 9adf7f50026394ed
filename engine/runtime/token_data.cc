#include "engine/runtime/token_data.h"

#include <algorithm>
#include <cstring>

#include "engine/runtime/data_inputs.h"
#include "formats/error.h"
#include "formats/flag_list.h"
#include "formats/mapped_file.h"

namespace piper::engine {
namespace {

size_t token_size(TokenDType dtype) { return dtype == TokenDType::kUint16 ? 2 : 4; }
const char* token_dtype_name(TokenDType dtype) {
  return dtype == TokenDType::kUint16 ? "uint16" : "uint32";
}

std::string inputs_text(const std::vector<TokenInput>& inputs) {
  std::string text;
  for (const TokenInput& input : inputs) {
    text += (text.empty() ? "" : ",") + input.input + "=" + std::to_string(input.offset);
  }
  return text;
}

std::string plan_inputs_text(const std::vector<InputSpec>& specs) {
  std::string text;
  for (const InputSpec& spec : specs) text += (text.empty() ? "" : ", ") + spec.name;
  return text.empty() ? "none" : text;
}

// A plan input fed from the file, with its window's offset.
struct Window {
  InputSpec spec;
  int64_t offset = 0;
  int64_t length = 0;  // the model's sequence length
};

class TokenSource : public BatchSource {
 public:
  TokenSource(const plan::Plan& plan, const TokenOptions& options, uint64_t seed)
      : options_(options),
        global_batch_(plan.global_batch()),
        seed_(seed),
        file_(map_tokens(options)) {
    const std::vector<InputSpec> specs = input_specs(plan);
    int64_t max_offset = 0;
    for (const TokenInput& input : options.inputs) {
      max_offset = std::max(max_offset, input.offset);
      auto spec = std::find_if(specs.begin(), specs.end(),
                               [&](const InputSpec& s) { return s.name == input.input; });
      if (spec == specs.end()) {
        // Another rank's stage may read it; the plan of one rank reads every model input.
        if (plan.header().world_size() > 1) continue;
        throw Error("--token-inputs " + inputs_text(options.inputs) + ": the plan has no input '" +
                    input.input + "'; its inputs are " + plan_inputs_text(specs));
      }
      const std::string entry =
          "--token-inputs " + input.input + "=" + std::to_string(input.offset);
      if (spec->dtype != plan::INT64 || spec->row_shape.size() != 1) {
        throw Error(entry + ": the plan's input '" + input.input + "' is " +
                    dtype_name(spec->dtype) + " " + sample_shape_string(spec->row_shape) +
                    "; token windows feed int64 inputs of shape [samples, sequence]");
      }
      // Every rank must draw the same positions, so the span may not depend on which inputs
      // this rank reads: one sequence length for all.
      if (!windows_.empty() && spec->row_shape[0] != windows_.front().length) {
        throw Error(entry + ": the plan's input '" + input.input + "' has sequence length " +
                    std::to_string(spec->row_shape[0]) + " but '" + windows_.front().spec.name +
                    "' has " + std::to_string(windows_.front().length) +
                    "; the inputs of one token stream share one sequence length");
      }
      windows_.push_back({*spec, input.offset, spec->row_shape[0]});
    }
    span_ = windows_.empty() ? 0 : max_offset + windows_.front().length;
    tokens_ = static_cast<int64_t>(file_.bytes().size() / token_size(options.dtype));
    if (tokens_ < span_) {
      throw Error("--tokens '" + options.path + "' holds " + std::to_string(tokens_) +
                  " tokens, fewer than one window of --token-inputs " +
                  inputs_text(options.inputs) + " needs (" + std::to_string(span_) +
                  " tokens: the largest offset plus the sequence length)");
    }
  }

  Batch batch(int64_t step) override {
    Batch batch;
    for (const Window& window : windows_) {
      HostTensor tensor = empty_batch(window.spec, global_batch_);
      auto* out = reinterpret_cast<int64_t*>(tensor.data.data());
      for_each_row(window.spec, [&](int64_t row) {
        const int64_t sample = step * global_batch_ + row;
        const int64_t start = token_window_start(seed_, sample, tokens_, span_) + window.offset;
        read_window(window, start, out + row * window.length);
      });
      batch.emplace(window.spec.name, std::move(tensor));
    }
    return batch;
  }

  std::optional<formats::TokenStream> token_stream() const override {
    return formats::TokenStream{options_.path, token_dtype_name(options_.dtype), tokens_,
                                inputs_text(options_.inputs)};
  }

  std::string describe() const override {
    return "tokens from " + options_.path + " (" + token_dtype_name(options_.dtype) + ", " +
           std::to_string(tokens_) + " tokens; " + inputs_text(options_.inputs) + ")";
  }

 private:
  // The token file, mapped, once its size is checked against the dtype.
  static formats::MappedFile map_tokens(const TokenOptions& options) {
    formats::MappedFile file = [&] {
      try {
        return formats::MappedFile(options.path);
      } catch (const Error& error) {
        throw Error(std::string("--tokens: ") + error.what());
      }
    }();
    const size_t size = token_size(options.dtype);
    if (file.bytes().size() % size != 0) {
      throw Error("--tokens '" + options.path + "' is " + std::to_string(file.bytes().size()) +
                  " bytes, not a multiple of " + std::to_string(size) + " (--token-dtype " +
                  token_dtype_name(options.dtype) + "); is it a file of " +
                  token_dtype_name(options.dtype) + " token ids?");
    }
    return file;
  }

  void read_window(const Window& window, int64_t start, int64_t* out) const {
    const size_t size = token_size(options_.dtype);
    const char* bytes = file_.bytes().data() + static_cast<size_t>(start) * size;
    for (int64_t t = 0; t < window.length; ++t) {
      uint32_t token = 0;
      if (size == 2) {
        uint16_t narrow = 0;
        std::memcpy(&narrow, bytes + t * 2, 2);
        token = narrow;
      } else {
        std::memcpy(&token, bytes + t * 4, 4);
      }
      if (window.spec.int_high > 0 && token >= window.spec.int_high) {
        throw Error("--tokens '" + options_.path + "': token " + std::to_string(start + t) +
                    " is id " + std::to_string(token) + ", but the model's input '" +
                    window.spec.name + "' takes ids below " + std::to_string(window.spec.int_high) +
                    " (its vocabulary); was the file tokenized for another model, or is "
                    "--token-dtype " +
                    token_dtype_name(options_.dtype) + " wrong?");
      }
      out[t] = token;
    }
    file_.release(static_cast<size_t>(start) * size, static_cast<size_t>(window.length) * size);
  }

  TokenOptions options_;
  int64_t global_batch_;
  uint64_t seed_;
  formats::MappedFile file_;
  std::vector<Window> windows_;
  int64_t span_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace

TokenDType parse_token_dtype(const std::string& text) {
  if (text == "uint16") return TokenDType::kUint16;
  if (text == "uint32") return TokenDType::kUint32;
  throw Error("--token-dtype " + text + ": token files hold uint16 or uint32 ids");
}

std::vector<TokenInput> parse_token_inputs(const std::string& text) {
  std::vector<TokenInput> inputs;
  for (const std::string& entry : formats::split_commas(text)) {
    const size_t equals = entry.find('=');
    const std::string name = entry.substr(0, equals);
    const std::string offset = equals == std::string::npos ? "" : entry.substr(equals + 1);
    if (name.empty() || !formats::is_count(offset, 18)) {
      throw Error("--token-inputs " + text + ": '" + entry +
                  "' is not NAME=OFFSET with OFFSET a count of tokens of 0 or more (e.g. "
                  "idx=0,tgt=1, or input_ids=0,labels=0 for HuggingFace models)");
    }
    for (const TokenInput& seen : inputs) {
      if (seen.input == name) {
        throw Error("--token-inputs " + text + ": input '" + name +
                    "' is named twice; give each input one offset");
      }
    }
    inputs.push_back({name, std::stoll(offset)});
  }
  return inputs;
}

int64_t token_window_start(uint64_t seed, int64_t sample, int64_t tokens, int64_t span) {
  const auto positions = static_cast<uint64_t>(tokens - span + 1);
  return static_cast<int64_t>(mix(seed, static_cast<uint64_t>(sample)) % positions);
}

std::unique_ptr<BatchSource> make_token_source(const plan::Plan& plan, const TokenOptions& options,
                                               uint64_t seed) {
  return std::make_unique<TokenSource>(plan, options, seed);
}

}  // namespace piper::engine
