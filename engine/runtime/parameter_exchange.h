// Pipeline stages hold different parameters; saving the model needs all of
// them in one place. Every member of a group broadcasts what it holds in
// turn, so that every member ends with the union.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/runtime/backend.h"

namespace piper::engine {

using ParameterValues = std::map<std::string, std::vector<uint8_t>>;

// Adds to `values` every parameter another member of `link` holds and this
// one does not (a name held by several keeps the first value seen: replicas
// agree). `memory` is where `link` expects buffers when it does not use host
// memory (NCCL). Collective: every member must call it.
void exchange_parameters(Communicator& link, Backend& memory, ParameterValues& values);

}  // namespace piper::engine
