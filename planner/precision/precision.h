// The strategy's `precision` as rewrites of the training graph. bf16 follows PyTorch's
// autocast: before autodiff, casts are inserted so that matrix products run in bfloat16 and
// normalization, softmax, losses and reductions in float32, while the parameters (master
// weights), their gradients and the optimizer state stay float32. tf32 marks the float32
// matrix products of the whole training graph, which a GPU backend then runs in TF32.
#pragma once

#include <string>

#include "planner/ir/op_graph.h"

namespace piper::planner {

// Inserts the bf16 casts into a forward graph (before autodiff). Each op computes in one float
// dtype:
// - bfloat16 for matrix products (MatMul, Gemm, Einsum, piper.FusedAttention);
// - float32 for the ops where bfloat16 loses too much (LayerNormalization, Softmax,
//   LogSoftmax, the losses, reductions, Exp, Log, Pow, Sqrt, Reciprocal, CumSum);
// - for the others the widest float dtype among their per-microbatch inputs (float32 when
//   they have none).
// Parameters and constants are cast to the dtype of the op that reads them, except float32
// scalars, which kernels read as they are. An op's float outputs take its dtype, except the
// saved statistics of piper.FusedAttention (outputs 1 and 2), which stay float32. A loss that
// would end up bfloat16 is cast back to float32. Returns the number of casts inserted.
int insert_bf16_casts(ir::OpGraph& graph);

// Whether an op of this type computes a bfloat16 result as a float32 sum rounded once at the
// end (matrix products, piper.SumTo, piper.BiasGeluGrad's bias gradient), so that it may write
// the float32 sum instead: a weight gradient summed over microbatches and replicas, or a
// tensor-parallel partial sum summed over its group, is then rounded once, where one process
// rounds its whole sum.
bool sums_in_float32(const std::string& type);

// Marks float32 matrix products (forward, gradient and fused attention ops) with the
// attribute tf32 = 1.
void allow_tf32(ir::OpGraph& graph);

}  // namespace piper::planner
