// Plan reading (formats/plan_file.h), as piper-run reads rank<N>.plan. The first byte picks
// what the rest is: the whole file (framing: magic, version, length, checksum), or a
// payload framed here with a correct checksum, so that mutations reach the protobuf parse
// and the version and unknown-field checks behind the checksum.
#include <string>

#include "formats/checksum.h"
#include "formats/plan_file.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

template <typename T>
void append_le(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::string framed(const std::string& payload) {
  std::string file = "PIPRPLAN";
  append_le<uint32_t>(file, piper::formats::kPlanFormatVersion);
  append_le<uint64_t>(file, payload.size());
  append_le<uint64_t>(file, piper::formats::crc32_of(payload));
  return file + payload;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  piper::fuzz::quiet_protobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace piper;
  if (size == 0) return 0;
  const std::string rest = fuzz::as_string(data + 1, size - 1);
  fuzz::refusing_is_fine([&] {
    const std::string file = data[0] % 2 == 0 ? rest : framed(rest);
    const plan::Plan plan = formats::parse_plan_file(file, "fuzz.plan");
    std::string payload;
    if (!plan.SerializeToString(&payload)) fuzz::fail("a plan read does not serialize");
  });
  return 0;
}
