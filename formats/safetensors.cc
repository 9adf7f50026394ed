#include "formats/safetensors.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/error.h"

namespace piper::formats {
namespace {

constexpr uint64_t kHeaderLengthBytes = 8;
// The reference implementation refuses headers over 100 MB; so does this reader.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t checked_elements(const std::vector<int64_t>& shape, const std::string& what) {
  uint64_t elements = 1;
  for (int64_t dim : shape) {
    if (dim < 0) throw Error(what + " has a negative dimension");
    elements *= static_cast<uint64_t>(dim);
  }
  return elements;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  const auto found = sizes.find(dtype);
  if (found == sizes.end()) throw Error("unknown safetensors dtype '" + dtype + "'");
  return found->second;
}

std::string safetensors_bytes(const std::vector<SafetensorsEntry>& entries,
                              const std::map<std::string, std::string>& metadata) {
  std::map<std::string, const SafetensorsEntry*> by_name;
  for (const SafetensorsEntry& entry : entries) {
    if (entry.name == "__metadata__" || !by_name.emplace(entry.name, &entry).second) {
      throw Error("safetensors: tensor name '" + entry.name + "' is reserved or repeated");
    }
    const uint64_t bytes =
        checked_elements(entry.shape, "safetensors tensor '" + entry.name + "'") *
        safetensors_dtype_size(entry.dtype);
    if (bytes != entry.data.size()) {
      throw Error("safetensors tensor '" + entry.name + "' has " +
                  std::to_string(entry.data.size()) + " bytes of data, its shape needs " +
                  std::to_string(bytes));
    }
  }
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, entry] : by_name) {
    header[name] = {{"dtype", entry->dtype},
                    {"shape", entry->shape},
                    {"data_offsets", {offset, offset + entry->data.size()}}};
    offset += entry->data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string file(kHeaderLengthBytes, '\0');
  const uint64_t length = text.size();
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) file[i] = static_cast<char>(length >> (8 * i));
  file.reserve(file.size() + text.size() + offset);
  file += text;
  for (const auto& [name, entry] : by_name) file.append(entry->data);
  return file;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw Error("cannot read '" + path_ + "': " + std::strerror(errno));
  std::error_code error;
  const uint64_t size = std::filesystem::file_size(path_, error);
  unsigned char length_bytes[kHeaderLengthBytes] = {};
  in.read(reinterpret_cast<char*>(length_bytes), kHeaderLengthBytes);
  if (error || !in) throw Error("'" + path_ + "' is not a safetensors file: it is too short");
  uint64_t length = 0;
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) length |= uint64_t{length_bytes[i]} << (8 * i);
  if (length > kMaxHeaderBytes || length > size - kHeaderLengthBytes) {
    throw Error("'" + path_ + "' is not a safetensors file: its header length " +
                std::to_string(length) + " does not fit its " + std::to_string(size) + " bytes");
  }
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  data_start_ = kHeaderLengthBytes + length;
  const uint64_t data_bytes = size - data_start_;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
    if (!header.is_object()) throw Error("the header is not a JSON object");
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        metadata_ = value.get<std::map<std::string, std::string>>();
        continue;
      }
      SafetensorsTensor tensor;
      tensor.dtype = value.at("dtype").get<std::string>();
      tensor.shape = value.at("shape").get<std::vector<int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_bytes) {
        throw Error("tensor '" + name + "': data_offsets lie outside the " +
                    std::to_string(data_bytes) + " bytes of data");
      }
      tensor.begin = offsets[0];
      tensor.end = offsets[1];
      const uint64_t want = checked_elements(tensor.shape, "tensor '" + name + "'") *
                            safetensors_dtype_size(tensor.dtype);
      if (want != tensor.end - tensor.begin) {
        throw Error("tensor '" + name + "' holds " + std::to_string(tensor.end - tensor.begin) +
                    " bytes, its shape needs " + std::to_string(want));
      }
      tensors_.emplace(name, std::move(tensor));
    }
  } catch (const std::exception& failure) {
    throw Error("'" + path_ + "' is not a valid safetensors file: " + failure.what());
  }
}

std::string SafetensorsFile::read(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) {
    throw Error("'" + path_ + "' holds no tensor '" + name + "'");
  }
  std::ifstream in(path_, std::ios::binary);
  std::string bytes(found->second.end - found->second.begin, '\0');
  in.seekg(static_cast<std::streamoff>(data_start_ + found->second.begin));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw Error("cannot read tensor '" + name + "' of '" + path_ + "': the file is short");
  return bytes;
}

}  // namespace piper::formats
