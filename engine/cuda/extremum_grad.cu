#include "engine/cuda/device.cuh"
#include "engine/cuda/extremum_grad.h"

namespace piper::engine::cuda {
namespace {

// Tie counts are small integers, so the order of the atomic additions does not matter.
__global__ void count_ties_kernel(StridedIndex index, const float* x, const float* y,
                                  double* ties) {
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    int64_t o[3];
    index.offsets(i, o);
    if (x[o[1]] == y[o[2]]) atomicAdd(ties + o[0], 1.0);
  }
}

__global__ void share_among_ties_kernel(StridedIndex index, const float* x, const float* y,
                                        const float* dy, const double* ties, float* dx) {
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    int64_t o[4];
    index.offsets(i, o);
    dx[o[0]] = x[o[1]] == y[o[2]] ? dy[o[3]] / static_cast<float>(ties[o[3]]) : 0.0f;
  }
}

}  // namespace

void launch_count_ties(const StridedIndex& index, const float* x, const float* y, double* ties,
                       cudaStream_t stream) {
  if (index.total == 0) return;
  count_ties_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(index, x, y, ties);
  PIPER_CUDA_LAUNCH_CHECK("count_ties_kernel");
}

void launch_share_among_ties(const StridedIndex& index, const float* x, const float* y,
                             const float* dy, const double* ties, float* dx, cudaStream_t stream) {
  if (index.total == 0) return;
  share_among_ties_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(index, x, y, dy, ties,
                                                                            dx);
  PIPER_CUDA_LAUNCH_CHECK("share_among_ties_kernel");
}

}  // namespace piper::engine::cuda
