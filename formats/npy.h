// NumPy .npy files (format versions 1.0 and 2.0): little-endian float32 ('<f4'), int64
// ('<i8') and bool ('|b1') arrays in C order, the formats piper-run reads training data from.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/mapped_file.h"

namespace piper::formats {

enum class NpyDType { kFloat32, kInt64, kBool };

struct NpyArray {
  NpyDType dtype = NpyDType::kFloat32;
  std::vector<int64_t> shape;  // empty for a scalar
  std::vector<uint8_t> data;   // little-endian, C order

  int64_t elements() const;
};

// '<f4', '<i8' or '|b1'.
std::string npy_descr(NpyDType dtype);
// 4, 8 or 1.
size_t npy_dtype_size(NpyDType dtype);

// Where an .npy file's array lies: its dtype and shape, and its data_bytes bytes of data from
// byte data_offset of the file.
struct NpyHeader {
  NpyDType dtype = NpyDType::kFloat32;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  size_t data_bytes = 0;
};

// Parses the header of .npy bytes and checks that they hold the data it describes; the errors
// of parse_npy.
NpyHeader parse_npy_header(std::string_view bytes, const std::string& source);

// Parses .npy bytes; `source` names the file in errors. Throws piper::Error when the bytes are
// not .npy, the array is in Fortran order, the dtype is unsupported (naming it) or the data
// is truncated.
NpyArray parse_npy(std::string_view bytes, const std::string& source);
// Reads and parses `path`; errors name the path.
NpyArray read_npy(const std::string& path);

// An .npy file mapped read-only (formats/mapped_file.h): rows are read from disk as they are
// touched, so a data set need not fit in memory. Throws as read_npy.
struct MappedNpy {
  explicit MappedNpy(const std::string& path);
  std::string_view data() const {
    return file.bytes().substr(header.data_offset, header.data_bytes);
  }

  MappedFile file;
  NpyHeader header;
};

// The .npy bytes of `array` (version 1.0, or 2.0 when the header needs it).
std::string serialize_npy(const NpyArray& array);
// Writes `array` to `path` atomically. Throws piper::Error when data and shape disagree.
void write_npy(const std::string& path, const NpyArray& array);

}  // namespace piper::formats
