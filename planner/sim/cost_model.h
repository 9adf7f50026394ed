// The cost model: how long each task of the task DAG takes on one device,
// from FLOPs and bytes over device rates (compute tasks) and bytes over link
// bandwidth plus latency (comm tasks). Tensor shapes in the op graph are per
// microbatch already, so a task's estimate is that of one microbatch.
//
// A compute task takes, summed over its ops,
//   max(flops / flops_rate, bytes read and written / memory_bandwidth) + op_overhead.
// A comm task over n devices moving B bytes takes
//   link_latency + factor * B / link_bandwidth,
// factor 2(n-1)/n for a ring all-reduce, (n-1)/n for reduce-scatter,
// all-gather and all-to-all (B the whole, unsharded tensor), 1 for send,
// recv and broadcast; nothing when n = 1.
#pragma once

#include <string>

#include "planner/ir/task_graph.h"

namespace piper::planner::sim {

// Rates of one device and of the links between devices. The defaults describe
// a small CPU machine roughly (OpenBLAS reaches ~200 GFLOP/s on two cores for
// large GEMMs, less for the small ones of the samples; loopback TCP).
struct DeviceRates {
  double flops = 100e9;            // FLOP/s a kernel reaches
  double memory_bandwidth = 10e9;  // bytes/s a kernel reads plus writes
  double link_bandwidth = 1e9;     // bytes/s between two devices, per direction
  double link_latency = 20e-6;     // seconds each transfer or collective adds
  double op_overhead = 2e-6;       // seconds each kernel adds (dispatch, launch)

  // Throws piper::Error naming the first rate that is not positive (the
  // latency and overhead may be 0).
  void check() const;
  // "100 GFLOP/s, 10 GB/s memory, 1 GB/s link, 20 us latency".
  std::string describe() const;
};

// Floating-point operations of one op: 2*M*N*K for MatMul, Gemm and
// piper.MatMul (batch dimensions multiply), 2 per multiply-add for Einsum and
// the fused attention ops, a few per element for elementwise, normalisation
// and optimizer ops, none for ops that only move or reshape data.
double op_flops(const ir::OpGraph& graph, const ir::Op& op);

// Bytes an op reads (its inputs) plus writes (its outputs).
double op_bytes(const ir::OpGraph& graph, const ir::Op& op);

// Bytes a comm task moves: the tensors of send, recv, all-reduce, broadcast
// and all-to-all; the unsharded side (the larger tensor of each pair) of
// reduce-scatter and all-gather.
double comm_bytes(const ir::TaskGraph& graph, const ir::Task& task);

// Seconds one instance of task `id` takes on one of its devices.
double task_seconds(const ir::TaskGraph& graph, ir::TaskId id, const DeviceRates& rates);

}  // namespace piper::planner::sim
