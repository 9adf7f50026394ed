// Launchers of the reductions (reduce.cu): every output element folds its group of
// input elements, in double precision, optionally split into chunks whose partial
// results a second kernel combines (enough threads when outputs are few).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/float_view.h"
#include "engine/cuda/strided.h"

namespace piper::engine::cuda {

enum class Fold { kSum, kMax };  // kMax: NaN propagates; an empty group gives -inf

struct ReducePlan {
  Fold fold = Fold::kSum;
  StridedIndex outputs;  // over the output elements: operand 0 its group's first input offset
  StridedIndex group;    // over one group: operand 0 the input offset from the first
  int chunks = 1;        // > 1: partials hold chunks * outputs.total doubles
  double scale = 1.0;    // applied to sums
};

// The number of chunks that keeps the GPU busy for `outputs` groups of `group` elements.
int reduce_chunks(int64_t outputs, int64_t group);

// y[o] = scale * fold(x over group o), y contiguous in output order; x and y float32 or
// bfloat16.
void launch_reduce(const ReducePlan& plan, FloatView x, FloatView y, double* partials,
                   cudaStream_t stream);

}  // namespace piper::engine::cuda
