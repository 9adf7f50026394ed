// Launchers of ArgMax, ArgMin, TopK, OneHot and Hardmax (selection.cu), which select as the CPU
// kernels do (engine/cpu/selection_order.h). `lines` is the input's (for OneHot the output's) lines
// along the axis. Each issues one kernel to `stream` and checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cpu/selection_order.h"
#include "engine/cuda/fault.h"

namespace piper::engine::cuda {

// y[line] = the position of the first (`last`: the last) largest (`max`) or smallest element of
// each line of x (int64 when `int_x`, else float32).
void launch_arg_extreme(const cpu::AxisLines& lines, bool max, bool last, bool int_x, const void* x,
                        int64_t* y, cudaStream_t stream);
// The k first elements of each line of x in TopK's order, as values (x's type) and their
// positions. When *k_input is not k, reports `fault_code` with *k_input as the value instead.
void launch_top_k(const cpu::AxisLines& lines, int64_t k, bool largest, bool int_x, const void* x,
                  const int64_t* k_input, void* values, int64_t* indices, DeviceFault* fault,
                  int32_t fault_code, cudaStream_t stream);
// y = values[1] (on) where the position along the line equals the index (negative ones count
// from the end), values[0] (off) elsewhere; y and values int64 when `int_y`, indices int64
// when `int_indices`, else float32.
void launch_one_hot(const cpu::AxisLines& lines, bool int_y, bool int_indices, const void* indices,
                    const void* values, void* y, cudaStream_t stream);

// Hardmax: y = 1 at the first largest element of each line of x (as cpu::more_extreme orders
// them), 0 elsewhere; float32.
void launch_hardmax(const cpu::AxisLines& lines, const float* x, float* y, cudaStream_t stream);

}  // namespace piper::engine::cuda
