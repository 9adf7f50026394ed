// Checksums that detect damage and change, not tampering: CRC-32 for the bytes Piper writes
// (plan payloads, checkpoint shards), FNV-1a 64 for fingerprints (the model a plan was made
// from, a dropout node's name).
#pragma once

#include <cstdint>
#include <string_view>

namespace piper::formats {

inline uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : bytes) hash = (hash ^ byte) * 0x100000001b3ull;
  return hash;
}

// CRC-32 (zlib's, as gzip and PNG use). About 7x faster than fnv1a64, whose multiply per byte
// is serial: piper-plan checksums a gigabyte of plans at a thousand ranks.
uint32_t crc32_of(std::string_view bytes);

}  // namespace piper::formats
