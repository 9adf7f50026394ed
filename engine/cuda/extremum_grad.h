// Launchers of the gradients of Max, Min and ReduceMax (extremum_grad.cu), which share dY
// equally among the elements equal to the result (ties), as the CPU kernels do. Each issues
// one kernel to `stream` and checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include "engine/cuda/strided.h"

namespace piper::engine::cuda {

// ties[o0] += 1 where x[o1] == y[o2], over `index` (operands ties, x, y); several positions
// may add to one tie count.
void launch_count_ties(const StridedIndex& index, const float* x, const float* y, double* ties,
                       cudaStream_t stream);
// dx[o0] = x[o1] == y[o2] ? dy[o3] / ties[o3] : 0, over `index` (operands dx, x, y, and dy and
// ties alike).
void launch_share_among_ties(const StridedIndex& index, const float* x, const float* y,
                             const float* dy, const double* ties, float* dx, cudaStream_t stream);

}  // namespace piper::engine::cuda
