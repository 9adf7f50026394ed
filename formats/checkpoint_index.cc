#include "formats/checkpoint_index.h"

#include <nlohmann/json.hpp>

#include "formats/error.h"

namespace piper::formats {

int64_t TensorSlice::elements(const std::vector<int64_t>& shape) const {
  if (flat) return flat_length;
  int64_t count = 1;
  for (int64_t extent : start.empty() ? shape : size) count *= extent;
  return count;
}

std::string TensorSlice::describe() const {
  std::string text;
  if (!start.empty()) {
    text = "box [";
    for (size_t d = 0; d < start.size(); ++d) {
      text += (d ? ", " : "") + std::to_string(start[d]) + ":" + std::to_string(start[d] + size[d]);
    }
    text += "]";
  }
  if (flat) {
    text += (text.empty() ? "" : " ") + std::string("flat [") + std::to_string(flat_offset) + ", " +
            std::to_string(flat_offset + flat_length) + ")";
  }
  return text.empty() ? "whole" : text;
}

void check_slice(const TensorSlice& slice, const std::vector<int64_t>& shape,
                 const std::string& what) {
  bool fits = slice.start.empty() ||
              (slice.start.size() == shape.size() && slice.size.size() == shape.size());
  int64_t box = 1;
  for (size_t d = 0; fits && d < slice.start.size(); ++d) {
    fits = slice.start[d] >= 0 && slice.size[d] >= 0 && slice.start[d] + slice.size[d] <= shape[d];
    box *= slice.size[d];
  }
  if (slice.start.empty()) {
    for (int64_t extent : shape) box *= extent;
  }
  if (fits && slice.flat) {
    fits = slice.flat_offset >= 0 && slice.flat_length >= 0 &&
           slice.flat_offset + slice.flat_length <= box;
  }
  if (!fits) {
    std::string dims;
    for (int64_t extent : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(extent);
    throw Error(what + ": slice " + slice.describe() + " does not lie within shape [" + dims + "]");
  }
}

namespace {

nlohmann::json slice_json(const TensorSlice& slice) {
  nlohmann::json json = nlohmann::json::object();
  if (!slice.start.empty()) json["box"] = {{"start", slice.start}, {"size", slice.size}};
  if (slice.flat) json["flat"] = {{"offset", slice.flat_offset}, {"length", slice.flat_length}};
  return json;
}

TensorSlice parse_slice(const nlohmann::json& json) {
  TensorSlice slice;
  if (json.contains("box")) {
    slice.start = json.at("box").at("start").get<std::vector<int64_t>>();
    slice.size = json.at("box").at("size").get<std::vector<int64_t>>();
    if (slice.start.size() != slice.size.size()) throw Error("box start and size differ in rank");
  }
  if (json.contains("flat")) {
    slice.flat = true;
    slice.flat_offset = json.at("flat").at("offset").get<int64_t>();
    slice.flat_length = json.at("flat").at("length").get<int64_t>();
  }
  return slice;
}

}  // namespace

std::string TokenStream::describe() const {
  return std::to_string(tokens) + " " + dtype + " tokens of '" + file + "', " + inputs;
}

std::string checkpoint_index_json(const CheckpointIndex& index) {
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, tensor] : index.tensors) {
    nlohmann::json shards = nlohmann::json::array();
    for (const CheckpointShard& shard : tensor.shards) {
      nlohmann::json json = slice_json(shard.slice);
      json["file"] = shard.file;
      json["key"] = shard.key;
      json["crc32"] = shard.crc32;
      shards.push_back(std::move(json));
    }
    tensors[name] = {{"dtype", tensor.dtype}, {"shape", tensor.shape}, {"shards", shards}};
  }
  nlohmann::json json = {{"format", "piper-checkpoint"},
                         {"version", index.version},
                         {"step", index.step},
                         {"optimizer_steps", index.optimizer_steps},
                         {"data",
                          {{"samples_consumed", index.samples_consumed},
                           {"global_batch", index.global_batch},
                           {"seed", index.seed},
                           {"source", index.data}}},
                         {"plan_id", index.plan_id},
                         {"tensors", tensors}};
  if (!index.model_path.empty()) json["model"] = index.model_path;
  if (index.tokens) {
    // An addition readers of version 1 pass over: no version bump.
    json["data"]["tokens"] = {{"file", index.tokens->file},
                              {"dtype", index.tokens->dtype},
                              {"tokens", index.tokens->tokens},
                              {"inputs", index.tokens->inputs}};
  }
  return json.dump(1) + "\n";
}

CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& path) {
  CheckpointIndex index;
  std::string where = "";
  try {
    const nlohmann::json json = nlohmann::json::parse(text);
    if (json.value("format", "") != "piper-checkpoint") {
      throw Error("\"format\" is not \"piper-checkpoint\"");
    }
    index.version = json.at("version").get<int>();
    if (index.version != kCheckpointFormatVersion) {
      throw Error("\"version\" is " + std::to_string(index.version) + "; this piper-run reads " +
                  std::to_string(kCheckpointFormatVersion));
    }
    index.step = json.at("step").get<int64_t>();
    index.optimizer_steps = json.at("optimizer_steps").get<int64_t>();
    const nlohmann::json& data = json.at("data");
    index.samples_consumed = data.at("samples_consumed").get<int64_t>();
    index.global_batch = data.at("global_batch").get<int64_t>();
    index.seed = data.at("seed").get<uint64_t>();
    index.data = data.at("source").get<std::string>();
    if (data.contains("tokens")) {
      where = " at data/tokens";
      const nlohmann::json& tokens = data.at("tokens");
      index.tokens =
          TokenStream{tokens.at("file").get<std::string>(), tokens.at("dtype").get<std::string>(),
                      tokens.at("tokens").get<int64_t>(), tokens.at("inputs").get<std::string>()};
      where = "";
    }
    index.plan_id = json.at("plan_id").get<std::string>();
    index.model_path = json.value("model", "");
    for (const auto& [name, value] : json.at("tensors").items()) {
      where = " at tensors/" + name;
      CheckpointTensor tensor;
      tensor.dtype = value.at("dtype").get<std::string>();
      tensor.shape = value.at("shape").get<std::vector<int64_t>>();
      for (const nlohmann::json& shard_json : value.at("shards")) {
        CheckpointShard shard;
        shard.slice = parse_slice(shard_json);
        shard.file = shard_json.at("file").get<std::string>();
        shard.key = shard_json.at("key").get<std::string>();
        shard.crc32 = shard_json.at("crc32").get<uint32_t>();
        check_slice(shard.slice, tensor.shape, "a shard in '" + shard.file + "'");
        tensor.shards.push_back(std::move(shard));
      }
      index.tensors.emplace(name, std::move(tensor));
    }
  } catch (const std::exception& error) {
    throw Error("checkpoint index '" + path + "'" + where + ": " + error.what());
  }
  return index;
}

}  // namespace piper::formats
