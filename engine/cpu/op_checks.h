// The checks of the CPU kernels (dropout.cc, gemm.cc, indexing.cc, layout_ops.cc, math.cc,
// reduce.cc, sequence_ops.cc) that the CUDA kernels of the same ops share, so that errors read
// alike.
// The checks throw naming the op.
#pragma once

#include <string>
#include <vector>

#include "engine/cpu/dropout_stream.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/reduce_math.h"
#include "engine/cpu/scatter_reduction.h"
#include "engine/cpu/selection_order.h"

namespace piper::engine::cpu {

// X -> Y, both float32: the checks every one-input float32 kernel starts with.
inline void check_float_unary(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  args.expect_dtype(args.input(0), plan::FLOAT32, "input 0");
  args.expect_dtype(args.output(0), plan::FLOAT32, "output 0");
}

// piper.MatMul's optional Bias (input 2), a vector over Y's last dimension; null when absent.
const TensorView* check_matmul_bias(const KernelArgs& args);
// piper.MatMul's attribute `activation`: "" (one output) or "gelu_tanh", Y = GELU(product
// [+ Bias]) by the tanh approximation, whose optional output 1, PreActivation (Y's dtype and
// shape), receives product [+ Bias]. Returns whether Y gets the GELU.
bool check_matmul_activation(const KernelArgs& args);

// Equal, Less, Greater, LessOrEqual, GreaterOrEqual, And, Or, Xor(A, B) -> Y: inputs of one
// dtype broadcasting to a bool output.
void check_compare(const KernelArgs& args);

// Pow(A, B) -> Y: A float32 or int64, B float32 or int64, Y of A's dtype, broadcasting.
void check_pow(const KernelArgs& args);
// piper.PowBaseGrad(dY, A, B) (`base`) or piper.PowExponentGrad(dY, A, Y) -> dX in dY's shape:
// float32 but B, which may be int64.
void check_pow_grad(const KernelArgs& args, bool base);

// The operands of a gather (`grad` false: data input 0, gathered output 0, one dtype) or of
// its gradient (dY input 0, dX output 0, both float32), their counts and dtypes checked.
struct GatherOperands {
  const TensorView& gathered;  // the output, or dY
  const TensorView& data;      // input 0, or dX
};
GatherOperands check_gather_operands(const KernelArgs& args, bool grad);

// Gather(data, indices) -> Y and (`grad`) piper.GatherGrad(dY, indices) -> dX, attribute
// `axis`: the data seen as [outer, axis_size, inner] and the gathered tensor as [outer, count,
// inner], count being the number of indices (int64, input 1).
struct GatherAxis {
  int64_t outer = 1, axis_size = 0, inner = 1, count = 0;
};
GatherAxis check_gather(const KernelArgs& args, bool grad);

// The operands of a scatter (data input 0, indices input 1, updates input 2, output 0 of
// data's shape), their counts, dtypes and data's shape checked.
struct ScatterOperands {
  const TensorView& data;
  const TensorView& updates;
};
ScatterOperands check_scatter_operands(const KernelArgs& args);

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

// ScatterElements(data, indices, updates) -> Y: indices and updates of one shape and the
// data's rank, no larger than the data off the axis; Y of the data's dtype and shape. Returns
// the axis.
int64_t check_scatter_elements(const KernelArgs& args);

// The attribute `reduction` of ScatterND and ScatterElements (none, add or mul; add and mul
// only for float32 or int64 data).
ScatterReduction check_scatter_reduction(const KernelArgs& args, plan::DType data);
// Calls f.template operator()<T>() with the element type a scatter of `dtype` combines in: float
// and int64_t for float32 and int64 (which reductions take), else an unsigned integer of the
// dtype's size (copied bit for bit).
template <typename F>
auto by_scatter_type(plan::DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 8:
      return dtype == plan::INT64 ? f.template operator()<int64_t>()
                                  : f.template operator()<uint64_t>();
    case 4:
      return dtype == plan::FLOAT32 ? f.template operator()<float>()
                                    : f.template operator()<uint32_t>();
    case 2:
      return f.template operator()<uint16_t>();
    default:
      return f.template operator()<uint8_t>();
  }
}

// GatherND(data, indices) -> Y with attribute batch_dims, piper.GatherNDGrad(dY, indices) -> dX
// (its adjoint, float32; same attribute) and ScatterND(data, indices, updates) -> Y (batch_dims
// 0) all address the data through tuples of k indices (the indices' last dimension): tuple n
// of batch b picks the slice data[b, i0, ..., ik-1, ...] of `slice` contiguous elements, and
// the gathered (or scattered) tensor is [batches * tuples, slice]. Indices are int64.
struct NdGeometry {
  int64_t batches = 1;                 // the product of the leading batch_dims dimensions
  int64_t tuples = 0;                  // index tuples per batch
  int64_t slice = 1;                   // elements each tuple addresses
  int64_t batch_stride = 0;            // data elements per batch
  std::vector<int64_t> dims, strides;  // per tuple component: the data's extent and stride
};
// `grad`: piper.GatherNDGrad, whose output dX has the data's shape.
NdGeometry check_gather_nd(const KernelArgs& args, bool grad);
NdGeometry check_scatter_nd(const KernelArgs& args);

// ArgMax / ArgMin(X) -> Y (int64): the lines along the reduced axis, and in `last` whether the
// last extreme element is selected (select_last_index).
AxisLines check_arg_extreme(const KernelArgs& args, bool& last);

// Hardmax, Softmax or LogSoftmax(X) -> Y (float32, X's shape): the lines along `axis`
// (default -1).
AxisLines check_along_axis(const KernelArgs& args);
// piper.SoftmaxGrad or piper.LogSoftmaxGrad(dY, Y) -> dX (float32, one shape): the lines along
// `axis` (default -1).
AxisLines check_softmax_grad(const KernelArgs& args);

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

// Tile(input, repeats) -> Y (any dtype): Y seen as [r0, d0, r1, d1, ...] (the repeats and the
// input's dimensions interleaved) with the input's strides, 0 over each repeat. The repeats
// follow from the shapes, which the repeats input produced at planning (as Expand's shape).
struct TileWalk {
  Shape shape;
  std::vector<int64_t> output_strides, input_strides;
};
TileWalk check_tile(const KernelArgs& args);

// Reshape, Flatten, Identity, Squeeze, Unsqueeze(X, ...) -> Y: a copy of X's bytes into Y's
// shape (one dtype, one element count).
void check_copy(const KernelArgs& args);

// Transpose(X) -> Y by the attribute `perm` (default: reversed): returns X's strides along Y's
// dimensions.
std::vector<int64_t> check_transpose(const KernelArgs& args);

// Expand(X[, shape]) -> Y: X broadcasts to Y's shape (the shape input made Y's at planning).
void check_expand(const KernelArgs& args);

// Concat(X0, X1, ...) -> Y and Split(X[, split]) -> Y0, Y1, ...: the joined tensor is `outer`
// rows (one per index of the dimensions before the axis), each the parts' rows side by side.
struct JoinGeometry {
  int64_t axis = 0;
  int64_t outer = 1;
  size_t joined_row = 0;          // bytes of one row of the joined tensor
  std::vector<size_t> part_rows;  // bytes of one row of each part
};
// Checks the parts ("input" or "output" `part_kind` in messages) against the joined tensor.
JoinGeometry check_join(const KernelArgs& args, const TensorView& joined,
                        const std::vector<const TensorView*>& parts, const std::string& part_kind);
// Concat's geometry, its inputs and output checked.
JoinGeometry check_concat(const KernelArgs& args);
// Split's geometry, its inputs and outputs checked but the values of the optional `split` input
// (input 1), which check_split_sizes() checks once they are read.
JoinGeometry check_split(const KernelArgs& args);
// Split's `split` input values must be the outputs' sizes along the axis.
void check_split_sizes(const KernelArgs& args, const JoinGeometry& join,
                       const std::vector<int64_t>& sizes);

// piper.Accumulate(X) -> Y: Y += X, both float32 with one element count.
void check_accumulate(const KernelArgs& args);

// piper.Shard(X) -> Y: Y = elements [begin, begin + count) of flat X, zero past them to Y's
// end (attributes num_shards and shard_index, k = numel(Y), num_shards * k >= numel(X)).
struct ShardRange {
  int64_t begin = 0, count = 0;
};
ShardRange check_shard(const KernelArgs& args);

// piper.BroadcastTo(X) -> Y (float32): X with size-1 dimensions inserted at `axes` (Y's
// numbering), which broadcasts to Y's shape: returns that expanded shape of X.
Shape check_broadcast_to(const KernelArgs& args);

// Trilu(X[, k]) -> Y: any dtype, at least two dimensions; k is read at run time.
void check_trilu(const KernelArgs& args);

// Dropout(data[, ratio[, training_mode]]) -> output[, mask].
void check_dropout(const KernelArgs& args);
// piper.DropoutGrad(dY, mask[, ratio[, training_mode]]) -> dX.
void check_dropout_grad(const KernelArgs& args);
// What a Dropout kernel's masks are keyed by (plan.proto's DropoutKey), checked: its node's
// stream and where its elements lie in the whole tensor.
struct DropoutKeying {
  uint64_t node = 0;
  dropout::Box box;
};
DropoutKeying dropout_keying(const KernelArgs& args);
// The error of a Dropout run in training whose ratio lies outside [0, 1].
std::string dropout_ratio_error(float ratio);
// The ratio and training_mode inputs (from input `ratio_input` on: 1 for Dropout, 2 for its
// gradient) of a checked kernel.
dropout::Mode dropout_mode(const KernelArgs& args, size_t ratio_input);

}  // namespace piper::engine::cpu
