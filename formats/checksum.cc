#include "formats/checksum.h"

#include <zlib.h>

#include <algorithm>

namespace piper::formats {

uint32_t crc32_of(std::string_view bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  // zlib takes lengths as uInt: feed large buffers in pieces.
  constexpr size_t kPiece = 1u << 30;
  for (size_t at = 0; at < bytes.size(); at += kPiece) {
    const size_t count = std::min(kPiece, bytes.size() - at);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(count));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace piper::formats
