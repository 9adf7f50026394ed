// Reductions: thread (o, c) folds chunk c of output o's group; with one chunk it writes
// y[o], else a partial that combine_kernel folds. Adjacent threads take adjacent outputs,
// so reads coalesce when the kept dimensions are innermost (bias gradients, SumTo).
#include <algorithm>

#include "engine/cuda/device.cuh"
#include "engine/cuda/reduce.h"

namespace piper::engine::cuda {
namespace {

__device__ double fold_step(Fold fold, double acc, double v) {
  if (fold == Fold::kSum) return acc + v;
  return v != v || v > acc ? v : acc;
}

__global__ void reduce_kernel(ReducePlan plan, FloatView x, FloatView y, double* partials) {
  const int64_t outputs = plan.outputs.total;
  const int64_t group = plan.group.total;
  const int64_t length = (group + plan.chunks - 1) / plan.chunks;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * length;
  const int64_t end = begin + length < group ? begin + length : group;
  PIPER_GRID_STRIDE_LOOP(o, outputs) {
    int64_t base = 0;
    plan.outputs.offsets(o, &base);
    double acc = plan.fold == Fold::kSum ? 0.0 : -INFINITY;
    for (int64_t r = begin; r < end; ++r) {
      int64_t offset = 0;
      plan.group.offsets(r, &offset);
      acc = fold_step(plan.fold, acc, static_cast<double>(x.load(base + offset)));
    }
    if (plan.chunks == 1) {
      y.store(o, static_cast<float>(plan.fold == Fold::kSum ? acc * plan.scale : acc));
    } else {
      partials[chunk * outputs + o] = acc;
    }
  }
}

__global__ void combine_kernel(ReducePlan plan, const double* partials, FloatView y) {
  const int64_t outputs = plan.outputs.total;
  PIPER_GRID_STRIDE_LOOP(o, outputs) {
    double acc = plan.fold == Fold::kSum ? 0.0 : -INFINITY;
    for (int c = 0; c < plan.chunks; ++c)
      acc = fold_step(plan.fold, acc, partials[c * outputs + o]);
    y.store(o, static_cast<float>(plan.fold == Fold::kSum ? acc * plan.scale : acc));
  }
}

}  // namespace

int reduce_chunks(int64_t outputs, int64_t group) {
  constexpr int64_t kThreadsWanted = 1 << 16;
  constexpr int64_t kMinimumChunk = 32;
  int64_t chunks = outputs >= kThreadsWanted ? 1 : (kThreadsWanted + outputs - 1) / outputs;
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(group / kMinimumChunk, 1));
  return static_cast<int>(std::min<int64_t>(chunks, 65535));
}

void launch_reduce(const ReducePlan& plan, FloatView x, FloatView y, double* partials,
                   cudaStream_t stream) {
  if (plan.outputs.total == 0) return;
  const dim3 grid(blocks_for(plan.outputs.total), static_cast<unsigned int>(plan.chunks));
  reduce_kernel<<<grid, kThreads, 0, stream>>>(plan, x, y, partials);
  PIPER_CUDA_LAUNCH_CHECK("reduce_kernel");
  if (plan.chunks > 1) {
    combine_kernel<<<blocks_for(plan.outputs.total), kThreads, 0, stream>>>(plan, partials, y);
    PIPER_CUDA_LAUNCH_CHECK("combine_kernel");
  }
}

}  // namespace piper::engine::cuda
