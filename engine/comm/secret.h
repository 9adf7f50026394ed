// The cryptography of the rendezvous store's handshake (OpenSSL's libcrypto):
// random bytes from the kernel, HMAC-SHA256, and a comparison whose time does not
// depend on where two strings differ.
#pragma once

#include <cstddef>
#include <string>

namespace piper::engine {

// `count` bytes from /dev/urandom; throws piper::Error when it cannot be read.
std::string random_bytes(size_t count);
// A fresh job secret for PIPER_RENDEZVOUS_TOKEN: 32 random bytes as 64 hex digits.
std::string random_token();
// HMAC-SHA256 of `message` under `key` (32 bytes); an empty key is a valid key.
std::string hmac_sha256(const std::string& key, const std::string& message);
// Whether `a` equals `b`, in time that depends only on their lengths.
bool equal_in_constant_time(const std::string& a, const std::string& b);

}  // namespace piper::engine
