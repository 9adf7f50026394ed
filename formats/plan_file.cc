#include "formats/plan_file.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "formats/atomic_file.h"
#include "formats/checksum.h"
#include "formats/error.h"

namespace piper::formats {
namespace {

constexpr std::string_view kMagic = "PIPRPLAN";
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 8;

template <typename T>
void append_le(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

template <typename T>
T read_le(std::string_view bytes, size_t at) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

// Where `message` or a message inside it holds a field this build does not know ("header:
// field 9"), or "" when none does.
std::string first_unknown_field(const google::protobuf::Message& message, const std::string& path) {
  const google::protobuf::Reflection& reflection = *message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection.GetUnknownFields(message);
  if (!unknown.empty()) {
    return (path.empty() ? std::string("the plan") : path) + ": field " +
           std::to_string(unknown.field(0).number());
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string name = (path.empty() ? "" : path + ".") + field->name();
    if (!field->is_repeated()) {
      const std::string found = first_unknown_field(reflection.GetMessage(message, field), name);
      if (!found.empty()) return found;
      continue;
    }
    for (int i = 0; i < reflection.FieldSize(message, field); ++i) {
      const std::string found = first_unknown_field(
          reflection.GetRepeatedMessage(message, field, i), name + "[" + std::to_string(i) + "]");
      if (!found.empty()) return found;
    }
  }
  return "";
}

}  // namespace

void write_plan_file(const std::string& path, const plan::Plan& plan) {
  std::string payload;
  if (!plan.SerializeToString(&payload)) {
    throw Error("cannot serialize the plan for '" + path + "'");
  }
  std::string framed(kMagic);
  append_le<uint32_t>(framed, kPlanFormatVersion);
  append_le<uint64_t>(framed, payload.size());
  append_le<uint64_t>(framed, crc32_of(payload));
  framed += payload;
  write_file_atomically(path, framed);
}

plan::Plan read_plan_file(const std::string& path) {
  return parse_plan_file(read_file(path), path);
}

plan::Plan parse_plan_file(std::string_view view, const std::string& path) {
  if (view.size() < kMagic.size() || view.substr(0, kMagic.size()) != kMagic) {
    throw Error("'" + path + "' is not a Piper plan (bad magic); write plans with piper-plan");
  }
  if (view.size() < kHeaderBytes) {
    throw Error("plan '" + path + "' is truncated (" + std::to_string(view.size()) +
                " bytes, header alone is " + std::to_string(kHeaderBytes) + ")");
  }
  const auto version = read_le<uint32_t>(view, 8);
  if (version != kPlanFormatVersion) {
    throw Error("plan '" + path + "' has format version " + std::to_string(version) +
                " but this piper-run reads version " + std::to_string(kPlanFormatVersion) +
                "; re-plan with the matching piper-plan");
  }
  const auto length = read_le<uint64_t>(view, 12);
  const auto checksum = read_le<uint64_t>(view, 20);
  const std::string_view payload = view.substr(kHeaderBytes);
  if (payload.size() != length) {
    throw Error("plan '" + path + "' is truncated: payload has " + std::to_string(payload.size()) +
                " bytes, header says " + std::to_string(length));
  }
  if (crc32_of(payload) != checksum) {
    throw Error("plan '" + path + "' is corrupted: checksum mismatch");
  }
  plan::Plan plan;
  if (!plan.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    throw Error("plan '" + path + "' is corrupted: payload does not parse");
  }
  if (plan.header().format_version() != kPlanFormatVersion) {
    throw Error("plan '" + path + "' says it has format version " +
                std::to_string(plan.header().format_version()) + " but this piper-run reads " +
                std::to_string(kPlanFormatVersion) + "; re-plan with the matching piper-plan");
  }
  if (const std::string unknown = first_unknown_field(plan, ""); !unknown.empty()) {
    throw Error("plan '" + path + "' holds what this piper-run does not know (" + unknown +
                "): a newer piper-plan wrote it; re-plan with the matching piper-plan");
  }
  return plan;
}

}  // namespace piper::formats
