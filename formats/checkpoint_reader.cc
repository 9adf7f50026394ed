#include "formats/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

#include "formats/atomic_file.h"
#include "formats/error.h"

namespace piper::formats {

namespace fs = std::filesystem;

namespace {

std::optional<int64_t> step_of(const fs::path& folder) {
  const std::string name = folder.filename().string();
  const size_t prefix = std::strlen(kCheckpointStepPrefix);
  if (name.rfind(kCheckpointStepPrefix, 0) != 0 || name.size() == prefix) return {};
  const std::string digits = name.substr(prefix);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return {};
  }
  if (!fs::exists(folder / kCheckpointIndexFile)) return {};
  return std::stoll(digits);
}

}  // namespace

std::map<int64_t, std::string> committed_checkpoint_steps(const std::string& directory) {
  std::map<int64_t, std::string> steps;
  std::error_code error;
  if (!fs::is_directory(directory, error)) return steps;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (const auto step = step_of(entry.path()); step && entry.is_directory()) {
      steps[*step] = entry.path().string();
    }
  }
  return steps;
}

CheckpointIndex read_checkpoint_index(const std::string& folder) {
  const std::string path = (fs::path(folder) / kCheckpointIndexFile).string();
  return parse_checkpoint_index(read_file(path), path);
}

std::string CheckpointShardReader::read(const CheckpointShard& shard, const std::string& tensor) {
  const std::string path = (fs::path(folder_) / shard.file).string();
  auto& file = files_[path];
  if (!file) file = std::make_unique<SafetensorsFile>(path);
  std::string bytes = file->read(shard.key);
  if (crc32_of(bytes) != shard.crc32) {
    throw Error("checkpoint shard '" + path + "' is corrupted: tensor '" + tensor + "' (" +
                shard.slice.describe() + ") does not match the checksum in " + folder_ + "/" +
                kCheckpointIndexFile + "; resume from an earlier step folder or start afresh");
  }
  return bytes;
}

AssembledTensor assemble_tensor(const std::string& name, const CheckpointTensor& saved,
                                size_t element, CheckpointShardReader& reader) {
  int64_t elements = 1;
  for (int64_t extent : saved.shape) elements *= extent;
  AssembledTensor whole;
  whole.bytes.assign(static_cast<size_t>(elements) * element, 0);
  whole.covered.assign(static_cast<size_t>(elements), false);
  for (const CheckpointShard& shard : saved.shards) {
    const std::string bytes = reader.read(shard, name);
    if (bytes.size() != static_cast<size_t>(shard.slice.elements(saved.shape)) * element) {
      throw Error("checkpoint shard '" + shard.file + "' holds " + std::to_string(bytes.size()) +
                  " bytes of '" + name + "' " + shard.slice.describe() + ", the wrong size");
    }
    for_each_slice_run(shard.slice, saved.shape, element,
                       [&](uint64_t at, uint64_t from, uint64_t count) {
                         std::memcpy(whole.bytes.data() + at, bytes.data() + from, count);
                         std::fill_n(whole.covered.begin() + static_cast<int64_t>(at / element),
                                     static_cast<int64_t>(count / element), true);
                       });
  }
  return whole;
}

std::vector<uint8_t> slice_of(const AssembledTensor& whole, const std::string& name,
                              const TensorSlice& slice, const std::vector<int64_t>& shape,
                              size_t element, const std::string& holder) {
  std::vector<uint8_t> part(static_cast<size_t>(slice.elements(shape)) * element);
  for_each_slice_run(slice, shape, element, [&](uint64_t at, uint64_t to, uint64_t count) {
    const auto first = whole.covered.begin() + static_cast<int64_t>(at / element);
    if (!std::all_of(first, first + static_cast<int64_t>(count / element),
                     [](bool set) { return set; })) {
      throw Error("the checkpoint's shards of '" + name + "' leave out elements of " +
                  slice.describe() + ", " + holder);
    }
    std::memcpy(part.data() + to, whole.bytes.data() + at, count);
  });
  return part;
}

}  // namespace piper::formats
