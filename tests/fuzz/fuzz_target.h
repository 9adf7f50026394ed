// What every fuzz target shares: an input that Piper refuses with a piper::Error is a pass
// (that is the error path working); anything else escaping, a crash, a sanitizer report, a
// leak or a hang is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/error.h"

namespace piper::fuzz {

// The fuzzer's bytes as the text or bytes a parser takes.
inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Runs `body`, letting piper::Error (Piper's refusal of bad input) end the input.
template <typename Body>
void refusing_is_fine(Body&& body) {
  try {
    body();
  } catch (const Error&) {
  }
}

// Silences protobuf's log: every malformed input would print a line, and writing them
// would take most of the fuzzer's time.
void quiet_protobuf();

// A broken invariant: abort so that libFuzzer keeps the input as a crash.
[[noreturn]] void fail(const std::string& what);

}  // namespace piper::fuzz
