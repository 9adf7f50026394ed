// The safetensors format (Hugging Face's): an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype ("F32", "I64", "BOOL", "BF16", ...), shape and data_offsets (byte
// range within the data that follows), then the raw little-endian C-order data. Checkpoint
// shards use it, so that Python's `safetensors` package opens them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace piper::formats {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string_view data;  // numel(shape) * safetensors_dtype_size(dtype) bytes
};

// Bytes per element of a safetensors dtype; throws piper::Error naming an unknown one.
size_t safetensors_dtype_size(const std::string& dtype);

// The file's bytes: entries laid out in name order, the header padded with spaces to a
// multiple of 8 bytes (as the reference writer does), `metadata` under "__metadata__".
// Throws piper::Error when a name repeats or an entry's data does not match its shape.
std::string safetensors_bytes(const std::vector<SafetensorsEntry>& entries,
                              const std::map<std::string, std::string>& metadata = {});

struct SafetensorsTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets within the data section
  uint64_t end = 0;
};

// A safetensors file opened for reading: the header is parsed and checked (offsets within the
// file, sizes matching shapes) when it is opened; tensors are read on demand.
class SafetensorsFile {
 public:
  // Throws piper::Error naming `path` when it cannot be read or is not a safetensors file.
  explicit SafetensorsFile(std::string path);
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The bytes of tensor `name`; throws naming the file when it has none.
  std::string read(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace piper::formats
