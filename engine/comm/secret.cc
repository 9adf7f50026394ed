#include "engine/comm/secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "formats/error.h"

namespace piper::engine {

std::string random_bytes(size_t count) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string bytes(count, '\0');
  if (!urandom.read(bytes.data(), static_cast<std::streamsize>(count))) {
    throw Error(std::string("cannot read /dev/urandom for a random secret: ") +
                std::strerror(errno));
  }
  return bytes;
}

std::string random_token() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (const char byte : random_bytes(32)) {
    const auto bits = static_cast<unsigned char>(byte);
    token += kHex[bits >> 4];
    token += kHex[bits & 15];
  }
  return token;
}

std::string hmac_sha256(const std::string& key, const std::string& message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // A non-null key pointer even for an empty key: HMAC() treats a null key as "none given".
  static const unsigned char kNoKey = 0;
  const void* key_bytes = key.empty() ? static_cast<const void*>(&kNoKey) : key.data();
  if (HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest,
           &length) == nullptr) {
    throw Error("HMAC-SHA256 failed (OpenSSL)");
  }
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool equal_in_constant_time(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace piper::engine
