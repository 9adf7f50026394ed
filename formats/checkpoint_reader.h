// Reading a checkpoint step folder (formats/checkpoint_index.h): its index, and each logical
// tensor laid together from whichever shards hold it, every shard checked against its
// checksum. piper-run --resume and piper-export share it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint_index.h"
#include "formats/safetensors.h"

namespace piper::formats {

// "index.json": the name of a step folder's index, whose presence commits the step.
inline constexpr char kCheckpointIndexFile[] = "index.json";

// "step-": step folders are named step-NNNNNN after the steps done.
inline constexpr char kCheckpointStepPrefix[] = "step-";

// The committed step folders of checkpoint folder `directory` (step-N holding an index), by
// step; none when it has none or does not exist.
std::map<int64_t, std::string> committed_checkpoint_steps(const std::string& directory);

// The index of step folder `folder`; throws piper::Error naming the file.
CheckpointIndex read_checkpoint_index(const std::string& folder);

// Reads shards of one step folder, each file opened once.
class CheckpointShardReader {
 public:
  explicit CheckpointShardReader(std::string folder) : folder_(std::move(folder)) {}
  // The shard's bytes. Throws piper::Error naming the file when they do not match the
  // checksum in the index (a corrupted shard) or the file cannot be read.
  std::string read(const CheckpointShard& shard, const std::string& tensor);

 private:
  std::string folder_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

// A logical tensor laid together from its shards, C order, with the elements they covered.
struct AssembledTensor {
  std::vector<uint8_t> bytes;
  std::vector<bool> covered;  // by element
};

// Every shard of `saved` (of `element`-byte values) read and put in place; throws naming the
// file of a shard of the wrong size.
AssembledTensor assemble_tensor(const std::string& name, const CheckpointTensor& saved,
                                size_t element, CheckpointShardReader& reader);

// The bytes of `slice` of the assembled tensor; throws piper::Error, naming the tensor and
// `holder` ("which this rank holds"), when the shards left out any of them.
std::vector<uint8_t> slice_of(const AssembledTensor& whole, const std::string& name,
                              const TensorSlice& slice, const std::vector<int64_t>& shape,
                              size_t element, const std::string& holder);

}  // namespace piper::formats
