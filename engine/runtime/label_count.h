// Label counts (plan.proto LabelCount): per-step scalars the engine computes from the step's
// global batch rather than feeding rows, the divisors of token means.
#pragma once

#include "engine/runtime/batch.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

// The number of entries of `count.input()` in `batch` (the step's global batch) that are not
// `count.ignore_index()`. Throws piper::Error when the batch lacks the input or holds it with
// another dtype or sample shape.
float count_labels(const plan::LabelCount& count, const Batch& batch);

}  // namespace piper::engine
