#include "engine/cuda/device.cuh"
#include "engine/cuda/selection.h"

namespace piper::engine::cuda {
namespace {

// One thread per line, scanning it as the CPU kernel does.
template <bool kMax, typename T>
__global__ void arg_extreme_kernel(cpu::AxisLines lines, bool last, const T* x, int64_t* y) {
  PIPER_GRID_STRIDE_LOOP(line, lines.outer * lines.inner) {
    const int64_t o = line / lines.inner, c = line % lines.inner;
    const T* in = x + o * lines.n * lines.inner + c;
    int64_t best = 0;
    for (int64_t j = 1; j < lines.n; ++j) {
      const T v = in[j * lines.inner], b = in[best * lines.inner];
      if (cpu::more_extreme<kMax>(v, b) || (last && !cpu::more_extreme<kMax>(b, v))) best = j;
    }
    y[line] = best;
  }
}

template <typename T>
void arg_extreme(const cpu::AxisLines& lines, bool max, bool last, const void* x, int64_t* y,
                 cudaStream_t stream) {
  const unsigned int blocks = blocks_for(lines.outer * lines.inner);
  const auto* in = static_cast<const T*>(x);
  if (max) {
    arg_extreme_kernel<true><<<blocks, kThreads, 0, stream>>>(lines, last, in, y);
  } else {
    arg_extreme_kernel<false><<<blocks, kThreads, 0, stream>>>(lines, last, in, y);
  }
  PIPER_CUDA_LAUNCH_CHECK("arg_extreme_kernel");
}

// One thread per element: its rank in TopK's order (a total order) is its output position.
template <typename T>
__global__ void top_k_kernel(cpu::AxisLines lines, int64_t k, bool largest, const T* x,
                             const int64_t* k_input, T* values, int64_t* indices,
                             DeviceFault* fault, int32_t fault_code) {
  if (*k_input != k) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report_fault(fault, fault_code, *k_input, 0);
    return;
  }
  PIPER_GRID_STRIDE_LOOP(i, lines.outer * lines.n * lines.inner) {
    const int64_t c = i % lines.inner, a = i / lines.inner % lines.n,
                  o = i / (lines.inner * lines.n);
    const T* line = x + o * lines.n * lines.inner + c;
    const T va = line[a * lines.inner];
    int64_t rank = 0;
    for (int64_t b = 0; b < lines.n; ++b) {
      rank += cpu::top_k_before(line[b * lines.inner], va, b, a, largest) ? 1 : 0;
    }
    if (rank < k) {
      values[(o * k + rank) * lines.inner + c] = va;
      indices[(o * k + rank) * lines.inner + c] = a;
    }
  }
}

template <typename T>
void top_k(const cpu::AxisLines& lines, int64_t k, bool largest, const void* x,
           const int64_t* k_input, void* values, int64_t* indices, DeviceFault* fault,
           int32_t fault_code, cudaStream_t stream) {
  top_k_kernel<<<blocks_for(lines.outer * lines.n * lines.inner), kThreads, 0, stream>>>(
      lines, k, largest, static_cast<const T*>(x), k_input, static_cast<T*>(values), indices, fault,
      fault_code);
  PIPER_CUDA_LAUNCH_CHECK("top_k_kernel");
}

template <typename T, typename I>
__global__ void one_hot_kernel(cpu::AxisLines lines, const I* indices, const T* values, T* y) {
  PIPER_GRID_STRIDE_LOOP(i, lines.outer * lines.n * lines.inner) {
    const int64_t c = i % lines.inner, d = i / lines.inner % lines.n,
                  o = i / (lines.inner * lines.n);
    int64_t index = static_cast<int64_t>(indices[o * lines.inner + c]);
    if (index < 0) index += lines.n;
    y[i] = index == d ? values[1] : values[0];
  }
}

template <typename T, typename I>
void one_hot(const cpu::AxisLines& lines, const void* indices, const void* values, void* y,
             cudaStream_t stream) {
  one_hot_kernel<<<blocks_for(lines.outer * lines.n * lines.inner), kThreads, 0, stream>>>(
      lines, static_cast<const I*>(indices), static_cast<const T*>(values), static_cast<T*>(y));
  PIPER_CUDA_LAUNCH_CHECK("one_hot_kernel");
}

// One thread per line, scanning it as the CPU kernel does.
__global__ void hardmax_kernel(cpu::AxisLines lines, const float* x, float* y) {
  PIPER_GRID_STRIDE_LOOP(line, lines.outer * lines.inner) {
    const int64_t base = line / lines.inner * lines.n * lines.inner + line % lines.inner;
    int64_t best = 0;
    for (int64_t j = 0; j < lines.n; ++j) {
      y[base + j * lines.inner] = 0.0f;
      if (cpu::more_extreme<true>(x[base + j * lines.inner], x[base + best * lines.inner])) {
        best = j;
      }
    }
    if (lines.n > 0) y[base + best * lines.inner] = 1.0f;
  }
}

}  // namespace

void launch_hardmax(const cpu::AxisLines& lines, const float* x, float* y, cudaStream_t stream) {
  if (lines.outer * lines.inner == 0) return;
  hardmax_kernel<<<blocks_for(lines.outer * lines.inner), kThreads, 0, stream>>>(lines, x, y);
  PIPER_CUDA_LAUNCH_CHECK("hardmax_kernel");
}

void launch_arg_extreme(const cpu::AxisLines& lines, bool max, bool last, bool int_x, const void* x,
                        int64_t* y, cudaStream_t stream) {
  if (lines.outer * lines.inner == 0) return;
  return int_x ? arg_extreme<int64_t>(lines, max, last, x, y, stream)
               : arg_extreme<float>(lines, max, last, x, y, stream);
}

void launch_top_k(const cpu::AxisLines& lines, int64_t k, bool largest, bool int_x, const void* x,
                  const int64_t* k_input, void* values, int64_t* indices, DeviceFault* fault,
                  int32_t fault_code, cudaStream_t stream) {
  return int_x ? top_k<int64_t>(lines, k, largest, x, k_input, values, indices, fault, fault_code,
                                stream)
               : top_k<float>(lines, k, largest, x, k_input, values, indices, fault, fault_code,
                              stream);
}

void launch_one_hot(const cpu::AxisLines& lines, bool int_y, bool int_indices, const void* indices,
                    const void* values, void* y, cudaStream_t stream) {
  if (lines.outer * lines.n * lines.inner == 0) return;
  if (int_y) {
    return int_indices ? one_hot<int64_t, int64_t>(lines, indices, values, y, stream)
                       : one_hot<int64_t, float>(lines, indices, values, y, stream);
  }
  return int_indices ? one_hot<float, int64_t>(lines, indices, values, y, stream)
                     : one_hot<float, float>(lines, indices, values, y, stream);
}

}  // namespace piper::engine::cuda
