// Reductions (engine/cpu/reduce_math.h): thread (o, c) folds chunk c of output o's group; with
// one chunk it writes y[o], else a partial that combine_kernel folds and finishes. Adjacent threads
// take adjacent outputs, so reads coalesce when the kept dimensions are innermost (bias gradients,
// SumTo).
#include <algorithm>

#include "engine/cuda/device.cuh"
#include "engine/cuda/reduce.h"

namespace piper::engine::cuda {
namespace {

// An int64 tensor, loaded and stored as it is.
struct Int64View {
  int64_t* data;
  __device__ int64_t load(int64_t i) const { return data[i]; }
  __device__ void store(int64_t i, int64_t v) const { data[i] = v; }
};

// LogSumExp's shift of output o: its group's maximum, which the first pass wrote to y.
__device__ double shift_of(const ReducePlan& plan, FloatView y, int64_t o) {
  if (plan.reduction.map != cpu::ReduceMap::kExpShifted) return 0.0;
  return cpu::reduce_shift(static_cast<double>(y.load(o)));
}
__device__ int64_t shift_of(const ReducePlan&, Int64View, int64_t) { return 0; }

__device__ float finished(const ReducePlan& plan, double acc, double shift) {
  return static_cast<float>(cpu::reduce_finish(plan.reduction.finish, acc, plan.scale, shift));
}
__device__ int64_t finished(const ReducePlan&, int64_t acc, int64_t) { return acc; }

// Acc: double for float views, int64_t for Int64View.
template <typename Acc, typename View>
__global__ void reduce_kernel(ReducePlan plan, View x, View y, Acc* partials) {
  const cpu::ReduceFormula r = plan.reduction;
  const int64_t outputs = plan.outputs.total;
  const int64_t group = plan.group.total;
  const int64_t length = (group + plan.chunks - 1) / plan.chunks;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * length;
  const int64_t end = begin + length < group ? begin + length : group;
  PIPER_GRID_STRIDE_LOOP(o, outputs) {
    int64_t base = 0;
    plan.outputs.offsets(o, &base);
    const Acc shift = shift_of(plan, y, o);
    Acc acc = cpu::reduce_identity<Acc>(r.fold);
    for (int64_t i = begin; i < end; ++i) {
      int64_t offset = 0;
      plan.group.offsets(i, &offset);
      const Acc v = cpu::reduce_map<Acc>(r.map, static_cast<Acc>(x.load(base + offset)), shift);
      acc = cpu::reduce_combine(r.fold, acc, v);
    }
    if (plan.chunks == 1) {
      y.store(o, finished(plan, acc, shift));
    } else {
      partials[chunk * outputs + o] = acc;
    }
  }
}

template <typename Acc, typename View>
__global__ void combine_kernel(ReducePlan plan, const Acc* partials, View y) {
  const int64_t outputs = plan.outputs.total;
  PIPER_GRID_STRIDE_LOOP(o, outputs) {
    Acc acc = cpu::reduce_identity<Acc>(plan.reduction.fold);
    for (int c = 0; c < plan.chunks; ++c)
      acc = cpu::reduce_combine(plan.reduction.fold, acc, partials[c * outputs + o]);
    y.store(o, finished(plan, acc, shift_of(plan, y, o)));
  }
}

template <typename Acc, typename View>
void reduce(const ReducePlan& plan, View x, View y, Acc* partials, cudaStream_t stream) {
  const dim3 grid(blocks_for(plan.outputs.total), static_cast<unsigned int>(plan.chunks));
  reduce_kernel<<<grid, kThreads, 0, stream>>>(plan, x, y, partials);
  PIPER_CUDA_LAUNCH_CHECK("reduce_kernel");
  if (plan.chunks > 1) {
    combine_kernel<<<blocks_for(plan.outputs.total), kThreads, 0, stream>>>(plan, partials, y);
    PIPER_CUDA_LAUNCH_CHECK("combine_kernel");
  }
}

__global__ void reduce_prod_grad_kernel(StridedIndex index, const float* dy, const float* x,
                                        const float* zeros, const float* product, float* dx) {
  int64_t o[3];
  PIPER_GRID_STRIDE_LOOP(i, index.total) {
    index.offsets(i, o);
    dx[o[0]] = cpu::reduce_prod_grad(dy[o[2]], x[o[1]], zeros[o[2]], product[o[2]]);
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
  if (plan.reduction.map == cpu::ReduceMap::kExpShifted) {
    ReducePlan maxima = plan;
    maxima.reduction = cpu::kShiftFormula;
    launch_reduce(maxima, x, y, partials, stream);
  }
  reduce(plan, x, y, partials, stream);
}

void launch_reduce_int64(const ReducePlan& plan, const int64_t* x, int64_t* y, int64_t* partials,
                         cudaStream_t stream) {
  if (plan.outputs.total == 0) return;
  reduce(plan, Int64View{const_cast<int64_t*>(x)}, Int64View{y}, partials, stream);
}

void launch_reduce_prod_grad(const StridedIndex& index, const float* dy, const float* x,
                             const float* zeros, const float* product, float* dx,
                             cudaStream_t stream) {
  if (index.total == 0) return;
  reduce_prod_grad_kernel<<<blocks_for(index.total), kThreads, 0, stream>>>(index, dy, x, zeros,
                                                                            product, dx);
  PIPER_CUDA_LAUNCH_CHECK("reduce_prod_grad_kernel");
}

}  // namespace piper::engine::cuda
