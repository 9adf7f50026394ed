// Saving a model trained with parameters spread over ranks needs all of them in
// one place: pipeline stages hold different parameters (every member of a group
// broadcasts what it holds in turn, so that every member ends with the union),
// and ZeRO shards and tensor-parallel blocks are gathered over their group.
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

// Every member's `mine` (the same size on each) concatenated in group order. Any byte count:
// the communicator's float32 all-gather moves them padded to whole floats. `memory` as above.
// Collective.
std::vector<uint8_t> all_gather_bytes(Communicator& link, Backend& memory,
                                      const std::vector<uint8_t>& mine);

}  // namespace piper::engine
