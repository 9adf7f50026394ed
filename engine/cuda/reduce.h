// Launchers of the reductions (reduce.cu): every output element folds its group of
// input elements, in double precision, as engine/cpu/reduce_math.h says, optionally split into
// chunks whose partial results a second kernel combines (enough threads when outputs are few).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cpu/reduce_math.h"
#include "engine/cuda/float_view.h"
#include "engine/cuda/strided.h"

namespace piper::engine::cuda {

struct ReducePlan {
  cpu::ReduceFormula reduction;
  StridedIndex outputs;  // over the output elements: operand 0 its group's first input offset
  StridedIndex group;    // over one group: operand 0 the input offset from the first
  int chunks = 1;        // > 1: partials hold chunks * outputs.total doubles
  double scale = 1.0;    // ReduceFinish::kScale's
};

// The number of chunks that keeps the GPU busy for `outputs` groups of `group` elements.
int reduce_chunks(int64_t outputs, int64_t group);

// y[o] = the reduction of x over group o, y contiguous in output order; x and y float32 or
// bfloat16. LogSumExp first writes each group's maximum to y, which the second pass reads.
void launch_reduce(const ReducePlan& plan, FloatView x, FloatView y, double* partials,
                   cudaStream_t stream);

// The same for int64 x and y (cpu::takes_int64 formulas), folding in int64; partials hold
// chunks * outputs int64s.
void launch_reduce_int64(const ReducePlan& plan, const int64_t* x, int64_t* y, int64_t* partials,
                         cudaStream_t stream);

// dx[o0] = cpu::reduce_prod_grad(dy[o2], x[o1], zeros[o2], product[o2]) over `index`
// (operands dx, x, and the group of each element for dy, zeros and product).
void launch_reduce_prod_grad(const StridedIndex& index, const float* dy, const float* x,
                             const float* zeros, const float* product, float* dx,
                             cudaStream_t stream);

}  // namespace piper::engine::cuda
