// The checks of the CPU kernels (dropout.cc, gemm.cc, indexing.cc, layout_ops.cc, math.cc,
// reduce.cc, sequence_ops.cc) that the CUDA kernels of the same ops share, so that errors read
// alike.
// The checks throw naming the op.
#pragma once

#include <string>

#include "engine/cpu/dropout_stream.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/reduce_math.h"
#include "engine/cpu/selection_order.h"

namespace piper::engine::cpu {

// piper.MatMul's optional Bias (input 2), a vector over Y's last dimension; null when absent.
const TensorView* check_matmul_bias(const KernelArgs& args);
// piper.MatMul's attribute `activation`: "" (one output) or "gelu_tanh", Y = GELU(product
// [+ Bias]) by the tanh approximation, whose optional output 1, PreActivation (Y's dtype and
// shape), receives product [+ Bias]. Returns whether Y gets the GELU.
bool check_matmul_activation(const KernelArgs& args);

// Pow(A, B) -> Y: A float32 or int64, B float32 or int64, Y of A's dtype, broadcasting.
void check_pow(const KernelArgs& args);
// piper.PowBaseGrad(dY, A, B) (`base`) or piper.PowExponentGrad(dY, A, Y) -> dX in dY's shape:
// float32 but B, which may be int64.
void check_pow_grad(const KernelArgs& args, bool base);

// piper.MaxMinGrad(dY, Y, X0, X1, ...) -> dX: returns the attribute `input`, the forward input
// dX is the gradient of.
int64_t check_max_min_grad(const KernelArgs& args);
// ONNX Reduce*(X[, axes]) -> Y over `axes` (all when empty), with keepdims and
// noop_with_empty_axes (each element reduced alone): returns X's shape with 1 at the reduced
// axes and sets `count` to the elements reduced into each output.
Shape check_reduction(const KernelArgs& args, const std::vector<int64_t>& axes, int64_t* count);
// The dtype a Reduce* op with formula `r` computes in: X's and Y's, float32, or int64 where
// takes_int64(r).
plan::DType check_reduction_dtypes(const KernelArgs& args, const ReduceFormula& r);
// piper.ReduceMaxGrad(dY, X, Y) -> dX: returns the shape of X with the reduced axes 1, over
// which dY and Y are contiguous.
Shape check_reduce_max_grad(const KernelArgs& args);
// piper.ReduceProdGrad(dY, X) -> dX: the same.
Shape check_reduce_prod_grad(const KernelArgs& args);

// GatherElements(data, indices) -> Y, or (`grad`) piper.GatherElementsGrad(dY, indices) -> dX
// (float32): returns the axis.
int64_t check_gather_elements(const KernelArgs& args, bool grad);

// ArgMax / ArgMin(X) -> Y (int64): the lines along the reduced axis, and in `last` whether the
// last extreme element is selected (select_last_index).
AxisLines check_arg_extreme(const KernelArgs& args, bool& last);

// Hardmax(X) -> Y (float32, X's shape): the lines along `axis` (default -1).
AxisLines check_hardmax(const KernelArgs& args);

// TopK(X, K) -> values, indices: the lines along the axis, K (from the output shape; the K
// input must hold it at run time) and whether the largest are selected.
struct TopK {
  AxisLines lines;
  int64_t k = 0;
  bool largest = true;
};
TopK check_top_k(const KernelArgs& args);
// The error of a TopK run whose K input is not the plan's K.
std::string top_k_error(const std::string& op, int64_t k_input, int64_t k);

// OneHot(indices, depth, values) -> Y: the lines of Y along the inserted axis.
AxisLines check_one_hot(const KernelArgs& args);

// CumSum(X, axis) -> Y: int64 or float32; the axis is read at run time.
void check_cum_sum(const KernelArgs& args);
// The error of a CumSum run whose axis input is out of range.
std::string cum_sum_axis_error(const std::string& op, int64_t axis, int64_t rank);

// Trilu(X[, k]) -> Y: any dtype, at least two dimensions; k is read at run time.
void check_trilu(const KernelArgs& args);

// Dropout(data[, ratio[, training_mode]]) -> output[, mask].
void check_dropout(const KernelArgs& args);
// piper.DropoutGrad(dY, mask[, ratio[, training_mode]]) -> dX.
void check_dropout_grad(const KernelArgs& args);
// The error of a Dropout run in training whose ratio lies outside [0, 1].
std::string dropout_ratio_error(float ratio);
// The ratio and training_mode inputs (from input `ratio_input` on: 1 for Dropout, 2 for its
// gradient) of a checked kernel.
dropout::Mode dropout_mode(const KernelArgs& args, size_t ratio_input);

}  // namespace piper::engine::cpu
