// The rendezvous store's protocol (engine/comm/tcp_store.h): the input is what a client
// sends, messages framed as on the wire (u32 length, payload), each handled by a fresh
// server in turn as its connection thread would, without sockets. A malformed request ends
// the input, as it ends the connection.
#include <string_view>

#include "engine/comm/tcp_store.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// The next framed message of `input` into `payload`; false at the end or when the framing
// is one the server refuses (an empty, oversized or truncated message).
bool next_message(std::string_view& input, std::string& payload) {
  if (input.size() < 4) return false;
  uint32_t size = 0;
  for (int i = 0; i < 4; ++i)
    size |= static_cast<uint32_t>(static_cast<uint8_t>(input[i])) << (8 * i);
  input.remove_prefix(4);
  if (size == 0 || size > piper::engine::kTcpStoreMaxMessageBytes || size > input.size())
    return false;
  payload.assign(input.substr(0, size));
  input.remove_prefix(size);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace piper;
  engine::TcpStoreServer server("127.0.0.1", 0);
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string request;
  fuzz::refusing_is_fine([&] {
    while (next_message(input, request)) server.handle(request);
  });
  return 0;
}
