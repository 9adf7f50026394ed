#include "engine/comm/store.h"

#include <algorithm>
#include <cstdio>
#include <exception>

namespace piper::engine {

std::string seconds_text(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

std::vector<std::string> wait_for_keys(gloo::rendezvous::Store& store,
                                       const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    // After the deadline each remaining key still gets a short look.
    const auto left =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(1));
    try {
      store.wait({key}, left);
    } catch (const std::exception&) {
      missing.push_back(key);
    }
  }
  return missing;
}

}  // namespace piper::engine
