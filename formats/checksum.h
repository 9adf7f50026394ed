// FNV-1a (64 bit): the checksum of plan payloads and the fingerprint of the model a plan was
// made from. It detects damage and change, not tampering.
#pragma once

#include <cstdint>
#include <string_view>

namespace piper::formats {

inline uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : bytes) hash = (hash ^ byte) * 0x100000001b3ull;
  return hash;
}

}  // namespace piper::formats
