// The global gradient norm: after every directive, the L2 norm of every gradient the update
// ops apply, each element counted once however the strategy holds it, computed on every rank
// before any update and read by every update op (which skip the step when it is not finite;
// gradient clipping scales by it).
#pragma once

#include "planner/ir/task_graph.h"

namespace piper::planner {

// Adds, for every device d, a task on d alone (pass U) whose piper.SumSquares sums the squares
// of d's share of the applied gradients into the scalar "grad_norm/sum_squares": a gradient
// shard (a tensor with shard_of, ZeRO-2/3) whole, a gradient its replicas hold alike (ZeRO-0/1,
// one device) in one of as many equal slices as there are replicas. An all-reduce over every
// device adds the shares, a task on every device takes the square root into
// graph.op_graph().grad_norm, and every update op reads it as its last input. Each device's
// share waits for what its updates wait for, and every update waits for the norm; window edges
// from an update to a task of another pass are dropped, as that order no longer holds. Does nothing
// when nothing is trained. Throws std::logic_error when an update op is not in exactly one task
// or applies a gradient of no trained parameter.
void add_gradient_norm(ir::TaskGraph& graph);

}  // namespace piper::planner
