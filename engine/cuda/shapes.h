// Host-side geometry for the CUDA kernels: strided index spaces from the shapes the
// CPU kernels use (engine/cpu/strided_loop.h), and launch sizes.
#pragma once

#include <vector>

#include "engine/cuda/reduce.h"
#include "engine/cuda/strided.h"
#include "engine/runtime/tensor.h"

namespace piper::engine::cuda {

// The index space `shape` with one stride vector per operand (over `shape`'s dimensions),
// simplified like cpu::StridedLoop. Throws piper::Error when more than StridedIndex::kMaxDims
// dimensions remain or more than kMaxOperands operands are given.
StridedIndex strided_index(const Shape& shape, const std::vector<std::vector<int64_t>>& strides);

// Operand 0: `out` (contiguous); operand k + 1: inputs[k] broadcast to `out` (numpy rules).
StridedIndex broadcast_index(const Shape& out, const std::vector<Shape>& inputs);

// Folds a contiguous `x` over the dimensions where `kept` (x's rank, broadcasting to x) is 1
// and x's is not, into a contiguous output of kept's elements; kScale finishes scale by
// `scale`. The plan's partials need chunks * outputs.total doubles when chunks > 1.
ReducePlan reduce_plan(cpu::ReduceFormula reduction, const Shape& x, const Shape& kept,
                       double scale);

}  // namespace piper::engine::cuda
