#include "formats/build_info.h"

#include "build_info_values.h"

namespace piper::formats {

const std::string& piper_build_id() {
  static const std::string id = std::string(PIPER_VERSION) + "+" + PIPER_COMMIT;
  return id;
}

const char* piper_version() { return PIPER_VERSION; }

}  // namespace piper::formats
