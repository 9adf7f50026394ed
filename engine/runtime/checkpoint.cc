#include "engine/runtime/checkpoint.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/runtime/checkpoint_state.h"
#include "formats/atomic_file.h"
#include "formats/checkpoint_index.h"
#include "formats/checkpoint_reader.h"
#include "formats/error.h"
#include "formats/safetensors.h"

namespace piper::engine {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexFile = formats::kCheckpointIndexFile;
constexpr const char* kStepPrefix = formats::kCheckpointStepPrefix;

std::string rank_file(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.safetensors", rank);
  return name;
}

std::string slice_key(const std::string& name, const formats::TensorSlice& slice) {
  return name + " " + slice.describe();
}

// Writes this rank's owned parts not owned by a lower rank too (replicas hold the same) into
// its file of `folder`; returns an index of them alone, for rank 0 to merge.
formats::CheckpointIndex write_shards(Session& session, const std::vector<HeldTensor>& held,
                                      const std::string& folder) {
  const int rank = static_cast<int>(session.plan().header().rank());
  nlohmann::json keys = nlohmann::json::array();
  for (const HeldTensor& tensor : held)
    keys.push_back(slice_key(tensor.name, tensor.owned_slice()));
  const std::vector<std::string> every_rank = session.gather_from_every_rank(keys.dump());
  std::set<std::string> lower;
  for (int r = 0; r < rank; ++r) {
    const auto theirs =
        nlohmann::json::parse(every_rank[static_cast<size_t>(r)]).get<std::vector<std::string>>();
    lower.insert(theirs.begin(), theirs.end());
  }
  std::vector<std::string> data;
  std::vector<const HeldTensor*> written;
  for (const HeldTensor& tensor : held) {
    if (tensor.owned_length == 0 || lower.count(slice_key(tensor.name, tensor.owned_slice()))) {
      continue;
    }
    const std::vector<uint8_t> bytes = session.read_tensor_at(tensor.tensor);
    const size_t element = dtype_size(tensor.dtype);
    data.emplace_back(reinterpret_cast<const char*>(bytes.data()) + tensor.owned_offset * element,
                      static_cast<size_t>(tensor.owned_length) * element);
    written.push_back(&tensor);
  }
  formats::CheckpointIndex records;
  if (written.empty()) return records;
  std::vector<formats::SafetensorsEntry> entries;
  const std::string file = rank_file(rank);
  for (size_t i = 0; i < written.size(); ++i) {
    const formats::TensorSlice owned = written[i]->owned_slice();
    // A flat slice is stored flat; a box with its own shape.
    std::vector<int64_t> shape = owned.flat            ? std::vector<int64_t>{owned.flat_length}
                                 : owned.start.empty() ? written[i]->shape
                                                       : owned.size;
    entries.push_back({written[i]->name, safetensors_dtype(written[i]->dtype), shape, data[i]});
    formats::CheckpointTensor& tensor = records.tensors[written[i]->name];
    tensor.dtype = safetensors_dtype(written[i]->dtype);
    tensor.shape = written[i]->shape;
    tensor.shards.push_back({file, written[i]->name, owned, formats::crc32_of(data[i])});
  }
  formats::write_file_synced(
      (fs::path(folder) / file).string(),
      formats::safetensors_bytes(
          entries, {{"format", "piper-checkpoint-shard"}, {"rank", std::to_string(rank)}}));
  return records;
}

// Rank 0's index of the step: every rank's shards, and where training stands.
formats::CheckpointIndex merged_index(const Session& session, const TrainingPosition& position,
                                      const std::vector<std::string>& records) {
  formats::CheckpointIndex index;
  for (size_t rank = 0; rank < records.size(); ++rank) {
    const formats::CheckpointIndex theirs = formats::parse_checkpoint_index(
        records[rank], "the shards of rank " + std::to_string(rank));
    for (const auto& [name, tensor] : theirs.tensors) {
      formats::CheckpointTensor& merged = index.tensors[name];
      if (!merged.shards.empty() &&
          (merged.dtype != tensor.dtype || merged.shape != tensor.shape)) {
        throw Error("rank " + std::to_string(rank) + " saves '" + name +
                    "' with another dtype or shape than a lower rank; re-plan");
      }
      merged.dtype = tensor.dtype;
      merged.shape = tensor.shape;
      merged.shards.insert(merged.shards.end(), tensor.shards.begin(), tensor.shards.end());
    }
  }
  index.step = position.step;
  index.optimizer_steps = position.optimizer_steps;
  index.global_batch = session.plan().global_batch();
  index.samples_consumed = position.step * index.global_batch;
  index.seed = position.seed;
  index.data = position.data;
  index.tokens = position.tokens;
  index.plan_id = session.plan().header().plan_id();
  index.model_path = session.plan().header().model_path();
  return index;
}

// Rank 0's commit: the finished folder takes the step's name in one rename.
void commit(const std::string& temporary, const std::string& target) {
  std::error_code error;
  const std::string replaced = target + ".replaced";
  if (fs::exists(target)) {
    fs::remove_all(replaced, error);
    fs::rename(target, replaced, error);
    if (error) throw Error("cannot move the older '" + target + "' aside: " + error.message());
  }
  fs::rename(temporary, target, error);
  if (error) {
    throw Error("cannot commit checkpoint '" + target + "' (renaming '" + temporary +
                "'): " + error.message());
  }
  formats::sync_directory(fs::path(target).parent_path().string());
  fs::remove_all(replaced, error);
}

void prune(const std::string& directory, int64_t keep) {
  if (keep <= 0) return;
  std::map<int64_t, std::string> steps = formats::committed_checkpoint_steps(directory);
  while (static_cast<int64_t>(steps.size()) > keep) {
    std::error_code error;
    fs::remove_all(steps.begin()->second, error);
    if (error) {
      throw Error("--keep: cannot remove '" + steps.begin()->second + "': " + error.message());
    }
    steps.erase(steps.begin());
  }
}

}  // namespace

std::string step_folder(const std::string& directory, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%06" PRId64, kStepPrefix, step);
  return (fs::path(directory) / name).string();
}

std::optional<std::string> latest_checkpoint(const std::string& directory) {
  const std::map<int64_t, std::string> steps = formats::committed_checkpoint_steps(directory);
  if (steps.empty()) return std::nullopt;
  return steps.rbegin()->second;
}

std::string save_checkpoint(Session& session, const std::string& directory,
                            const TrainingPosition& position, int64_t keep) {
  const int rank = static_cast<int>(session.plan().header().rank());
  const std::string target = step_folder(directory, position.step);
  const std::string temporary =
      (fs::path(directory) / ("." + fs::path(target).filename().string() + ".tmp")).string();
  const std::vector<HeldTensor> held = held_state(session);
  if (rank == 0) {
    std::error_code error;
    fs::create_directories(directory, error);
    fs::remove_all(temporary, error);
    fs::create_directory(temporary, error);
    if (error) {
      throw Error("--checkpoint-dir: cannot create '" + temporary + "': " + error.message());
    }
  }
  // write_shards first gathers from every rank: after it rank 0 has made the folder.
  const formats::CheckpointIndex records = write_shards(session, held, temporary);
  // Every rank's files are written once this gather is done.
  const std::vector<std::string> every_rank =
      session.gather_from_every_rank(formats::checkpoint_index_json(records));
  if (rank == 0) {
    const formats::CheckpointIndex index = merged_index(session, position, every_rank);
    formats::write_file_synced((fs::path(temporary) / kIndexFile).string(),
                               formats::checkpoint_index_json(index));
    formats::sync_directory(temporary);
    commit(temporary, target);
    prune(directory, keep);
  }
  return target;
}

namespace {

// The held slice's bytes, from the shard holding exactly it or else rebuilt from every shard.
std::vector<uint8_t> held_bytes(const HeldTensor& held, const formats::CheckpointTensor& saved,
                                formats::CheckpointShardReader& reader) {
  const size_t element = dtype_size(held.dtype);
  const auto expected = static_cast<size_t>(held.slice.elements(held.shape)) * element;
  for (const formats::CheckpointShard& shard : saved.shards) {
    if (shard.slice == held.slice) {
      const std::string bytes = reader.read(shard, held.name);
      if (bytes.size() != expected) {
        throw Error("checkpoint shard '" + shard.file + "' holds " + std::to_string(bytes.size()) +
                    " bytes of '" + held.name + "' " + shard.slice.describe() + ", which needs " +
                    std::to_string(expected));
      }
      return std::vector<uint8_t>(bytes.begin(), bytes.end());
    }
  }
  const formats::AssembledTensor whole =
      formats::assemble_tensor(held.name, saved, element, reader);
  return formats::slice_of(whole, held.name, held.slice, held.shape, element,
                           "which this rank holds");
}

}  // namespace

TrainingPosition load_checkpoint(Session& session, const std::string& folder, uint64_t seed) {
  const formats::CheckpointIndex index = formats::read_checkpoint_index(folder);
  if (index.global_batch != session.plan().global_batch()) {
    throw Error("checkpoint '" + folder + "' was trained with a global batch of " +
                std::to_string(index.global_batch) + ", this plan's is " +
                std::to_string(session.plan().global_batch()) +
                "; the data position continues only with the same global batch");
  }
  if (index.seed != seed) {
    throw Error("checkpoint '" + folder + "' was trained with --seed " +
                std::to_string(index.seed) + "; pass --seed " + std::to_string(index.seed) +
                " to continue its data and seeded kernels");
  }
  formats::CheckpointShardReader reader(folder);
  for (const HeldTensor& held : held_state(session)) {
    const auto saved = index.tensors.find(held.name);
    if (saved == index.tensors.end()) {
      throw Error("checkpoint '" + folder + "' holds no tensor '" + held.name +
                  "', which this plan trains; it was saved from another model or optimizer");
    }
    if (saved->second.dtype != safetensors_dtype(held.dtype) || saved->second.shape != held.shape) {
      throw Error("checkpoint '" + folder + "' holds '" + held.name + "' as " +
                  saved->second.dtype + " " + nlohmann::json(saved->second.shape).dump() +
                  ", this plan as " + safetensors_dtype(held.dtype) + " " +
                  nlohmann::json(held.shape).dump() + "; it was saved from another model");
    }
    const std::vector<uint8_t> bytes = held_bytes(held, saved->second, reader);
    session.write_tensor_at(held.tensor, bytes.data(), bytes.size());
  }
  session.restore_progress(index.step, index.optimizer_steps);
  return TrainingPosition{index.step, index.optimizer_steps, index.seed, index.data, index.tokens};
}

}  // namespace piper::engine
