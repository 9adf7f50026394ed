#include "engine/runtime/parameter_exchange.h"

#include <cstring>
#include <functional>
#include <memory>

#include "formats/error.h"

namespace piper::engine {
namespace {

// [name length u64][name][value length u64][value] per parameter.
std::vector<uint8_t> serialize(const ParameterValues& values) {
  std::vector<uint8_t> out;
  const auto append = [&](const void* data, size_t bytes) {
    const auto* begin = static_cast<const uint8_t*>(data);
    out.insert(out.end(), begin, begin + bytes);
  };
  for (const auto& [name, value] : values) {
    const uint64_t name_bytes = name.size(), value_bytes = value.size();
    append(&name_bytes, sizeof name_bytes);
    append(name.data(), name.size());
    append(&value_bytes, sizeof value_bytes);
    append(value.data(), value.size());
  }
  return out;
}

void merge(const std::vector<uint8_t>& blob, ParameterValues& values) {
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    if (at + bytes > blob.size()) throw Error("collecting parameters: a peer sent a cut record");
    const uint8_t* data = blob.data() + at;
    at += bytes;
    return data;
  };
  const auto take_size = [&] {
    uint64_t size = 0;
    std::memcpy(&size, take(sizeof size), sizeof size);
    return static_cast<size_t>(size);
  };
  while (at < blob.size()) {
    const size_t name_bytes = take_size();
    const auto* name = reinterpret_cast<const char*>(take(name_bytes));
    const size_t value_bytes = take_size();
    const uint8_t* value = take(value_bytes);
    values.emplace(std::string(name, name_bytes), std::vector<uint8_t>(value, value + value_bytes));
  }
}

using Staged = std::unique_ptr<void, std::function<void(void*)>>;

// A buffer of `memory`, where a communicator without host buffers expects them.
Staged stage(Backend& memory, size_t bytes) {
  return Staged(memory.allocate(bytes), [&memory](void* buffer) { memory.release(buffer); });
}

// Broadcasts `data` (resized on the receivers) from member `root`.
void broadcast_bytes(Communicator& link, Backend& memory, std::vector<uint8_t>& data, int root) {
  if (data.empty()) return;
  if (link.host_buffers()) {
    link.broadcast(data.data(), data.size(), root);
    return;
  }
  const Staged staged = stage(memory, data.size());
  memory.upload(staged.get(), data.data(), data.size());
  link.broadcast(staged.get(), data.size(), root);
  memory.download(data.data(), staged.get(), data.size());
}

}  // namespace

void exchange_parameters(Communicator& link, Backend& memory, ParameterValues& values) {
  const std::vector<uint8_t> mine = serialize(values);
  for (int root = 0; root < link.size(); ++root) {
    const bool sending = root == link.rank();
    uint64_t size = sending ? mine.size() : 0;
    std::vector<uint8_t> size_bytes(sizeof size);
    std::memcpy(size_bytes.data(), &size, sizeof size);
    broadcast_bytes(link, memory, size_bytes, root);
    std::memcpy(&size, size_bytes.data(), sizeof size);
    std::vector<uint8_t> blob = sending ? mine : std::vector<uint8_t>(size);
    broadcast_bytes(link, memory, blob, root);
    if (!sending) merge(blob, values);
  }
}

std::vector<uint8_t> all_gather_bytes(Communicator& link, Backend& memory,
                                      const std::vector<uint8_t>& mine) {
  const size_t bytes = mine.size(), members = static_cast<size_t>(link.size());
  const size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
  std::vector<float> padded(floats), all(floats * members);
  if (bytes > 0) std::memcpy(padded.data(), mine.data(), bytes);
  if (floats > 0 && link.host_buffers()) {
    link.all_gather(padded.data(), all.data(), floats);
  } else if (floats > 0) {
    const Staged in = stage(memory, floats * sizeof(float));
    const Staged out = stage(memory, all.size() * sizeof(float));
    memory.upload(in.get(), padded.data(), floats * sizeof(float));
    link.all_gather(static_cast<const float*>(in.get()), static_cast<float*>(out.get()), floats);
    memory.download(all.data(), out.get(), all.size() * sizeof(float));
  }
  std::vector<uint8_t> gathered(bytes * members);
  for (size_t member = 0; member < members && bytes > 0; ++member) {
    std::memcpy(gathered.data() + member * bytes, all.data() + member * floats, bytes);
  }
  return gathered;
}

}  // namespace piper::engine
