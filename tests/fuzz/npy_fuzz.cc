// .npy reading (formats/npy.h), as piper-run reads --data files. What parses must
// serialize and parse back to the same array.
#include "formats/npy.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace piper;
  fuzz::refusing_is_fine([&] {
    const formats::NpyArray array = formats::parse_npy(fuzz::as_string(data, size), "fuzz.npy");
    const formats::NpyArray again =
        formats::parse_npy(formats::serialize_npy(array), "fuzz.npy (serialized)");
    if (again.dtype != array.dtype || again.shape != array.shape || again.data != array.data) {
      fuzz::fail("serialize_npy of a parsed array parses to another array");
    }
  });
  return 0;
}
