// The index of a checkpoint step folder (docs/reliability.md): its format version, the training
// position (step, optimizer updates, samples consumed, seed) and every logical tensor, the
// model's name for it, with its global shape and the shards that hold it. Shards are in logical
// terms, not ranks, so that a plan of another layout finds what it needs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/checksum.h"

namespace piper::formats {

inline constexpr int kCheckpointFormatVersion = 1;

// What part of a logical tensor a shard holds: the n-dimensional box start[d] .. start[d] +
// size[d] (the whole tensor when `start` is empty), then, when `flat`, only elements
// [flat_offset, flat_offset + flat_length) of that box flattened in C order (ZeRO's slices).
struct TensorSlice {
  std::vector<int64_t> start;
  std::vector<int64_t> size;
  bool flat = false;
  int64_t flat_offset = 0;
  int64_t flat_length = 0;

  bool operator==(const TensorSlice&) const = default;
  // Elements the slice holds, within a tensor of `shape`.
  int64_t elements(const std::vector<int64_t>& shape) const;
  // "box [0:4, 8:16] flat [0, 12)", for messages.
  std::string describe() const;
};

// Throws piper::Error, prefixed by `what`, when `slice` does not lie within `shape`.
void check_slice(const TensorSlice& slice, const std::vector<int64_t>& shape,
                 const std::string& what);

// Calls run(tensor_byte, slice_byte, bytes) for each contiguous run of the slice's elements, in
// slice order: byte `tensor_byte` of the whole tensor (C order) is byte `slice_byte` of the
// slice's data. The slice must lie within `shape` (check_slice).
template <typename Run>
void for_each_slice_run(const TensorSlice& slice, const std::vector<int64_t>& shape, size_t element,
                        Run&& run);

struct CheckpointShard {
  std::string file;  // a safetensors file of the step folder
  std::string key;   // the tensor's name in that file
  TensorSlice slice;
  uint32_t crc32 = 0;  // of the shard's bytes
};

struct CheckpointTensor {
  std::string dtype;  // safetensors dtype
  std::vector<int64_t> shape;
  std::vector<CheckpointShard> shards;
};

// The token stream (piper-run --tokens) a run trains on: its windows depend on the number of
// tokens, their dtype and the inputs' offsets (and the seed), not on where the file lies.
struct TokenStream {
  std::string file;
  std::string dtype;  // "uint16" or "uint32"
  int64_t tokens = 0;
  std::string inputs;  // --token-inputs, e.g. "idx=0,tgt=1"

  // The same windows: all but the file's path agree.
  bool same_windows(const TokenStream& other) const {
    return dtype == other.dtype && tokens == other.tokens && inputs == other.inputs;
  }
  // "640000000 uint16 tokens of 'train.bin', idx=0,tgt=1"
  std::string describe() const;
};

struct CheckpointIndex {
  int version = kCheckpointFormatVersion;
  int64_t step = 0;             // training steps done
  int64_t optimizer_steps = 0;  // updates applied (steps minus skipped ones)
  int64_t samples_consumed = 0;
  int64_t global_batch = 0;
  uint64_t seed = 0;                  // of synthetic data and seeded kernels
  std::string data;                   // where samples come from, e.g. "data from samples/mlp/data"
  std::optional<TokenStream> tokens;  // data.tokens, when trained on a token file
  std::string plan_id;
  // The ONNX model the plan was made from (piper-export's default --model); empty in indexes
  // written before it was recorded.
  std::string model_path;
  std::map<std::string, CheckpointTensor> tensors;
};

std::string checkpoint_index_json(const CheckpointIndex& index);
// Throws piper::Error naming `path` and the JSON path at fault.
CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& path);

template <typename Run>
void for_each_slice_run(const TensorSlice& slice, const std::vector<int64_t>& shape, size_t element,
                        Run&& run) {
  const size_t rank = shape.size();
  std::vector<int64_t> start = slice.start.empty() ? std::vector<int64_t>(rank, 0) : slice.start;
  std::vector<int64_t> size = slice.start.empty() ? shape : slice.size;
  int64_t box = 1;
  for (int64_t extent : size) box *= extent;
  const int64_t first = slice.flat ? slice.flat_offset : 0;
  const int64_t last = slice.flat ? slice.flat_offset + slice.flat_length : box;
  if (first >= last) return;
  // A row: the box's extent along the last dimension (the whole box for a scalar).
  const int64_t row = rank == 0 ? 1 : size[rank - 1];
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  for (int64_t r = first / row; r * row < last; ++r) {
    // Where the box's row r starts in the tensor.
    int64_t index = r, offset = 0;
    for (size_t d = rank; d-- > 0;) {
      const int64_t coordinate = d + 1 == rank ? 0 : index % size[d];
      if (d + 1 != rank) index /= size[d];
      offset += (start[d] + coordinate) * strides[d];
    }
    const int64_t begin = std::max(first, r * row), end = std::min(last, (r + 1) * row);
    run(static_cast<uint64_t>(offset + begin - r * row) * element,
        static_cast<uint64_t>(begin - first) * element,
        static_cast<uint64_t>(end - begin) * element);
  }
}

}  // namespace piper::formats
