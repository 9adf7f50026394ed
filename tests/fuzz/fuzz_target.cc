#include "tests/fuzz/fuzz_target.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdio>
#include <cstdlib>

namespace piper::fuzz {

void quiet_protobuf() { google::protobuf::SetLogHandler(nullptr); }

void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz: invariant broken: %s\n", what.c_str());
  std::abort();
}

}  // namespace piper::fuzz
