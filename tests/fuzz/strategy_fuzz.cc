// Strategy parsing (formats/strategy.h), as piper-plan reads strategy.json. A strategy that
// parses must dump (to_json) and parse back to an equal Strategy, as strategy.h promises.
#include "formats/strategy.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace piper;
  fuzz::refusing_is_fine([&] {
    const strategy::Strategy parsed =
        strategy::parse_strategy(fuzz::as_string(data, size), "fuzz.json");
    const strategy::Strategy again =
        strategy::parse_strategy(strategy::to_json(parsed).dump(), "fuzz.json");
    if (!(again == parsed)) fuzz::fail("to_json of a parsed strategy parses to another strategy");
  });
  return 0;
}
