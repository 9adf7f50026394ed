// Kernels for the all-to-all-v collectives (plan::Collective ALL_TO_ALL_V and
// ALL_TO_ALL_V_RETURN, schemas/plan.proto): rows whose counts are known only when the step runs
// (the tokens a dropless router sent to each expert) travel to the members of a group and back.
// Each exchange first tells every member how many rows it receives from each other (an
// all-to-all of one int64 per member), then moves exactly those rows (Communicator::all_to_all_v),
// as Megatron's and DeepEP's dropless dispatchers do.
#pragma once

#include <memory>
#include <vector>

#include "engine/runtime/comm_ops.h"

namespace piper::engine {

// Whether `kind` is one of the row exchanges this file runs.
bool is_row_exchange(plan::Collective::Kind kind);

// Checks the tensors of a row exchange for a group of `group_size` members: how many there are,
// their dtypes (int64 counts, pieces of one dtype and row size) and that the rows received fit
// their bounds. Throws piper::Error naming the tensor and the rule it breaks.
void check_row_exchange(const plan::Collective& collective, const std::vector<CommTensor>& inputs,
                        const std::vector<CommTensor>& outputs, size_t group_size);

// The kernel running a checked row exchange on `communicator`; `memory` holds the tensors (it
// reads and writes the counts). The communicator and `memory` must outlive it.
std::unique_ptr<PreparedKernel> prepare_row_exchange(const plan::Collective& collective,
                                                     std::vector<CommTensor> inputs,
                                                     std::vector<CommTensor> outputs,
                                                     Communicator& communicator, Backend& memory);

}  // namespace piper::engine
