// The cost model: how long each task of the task DAG takes on one device,
// from FLOPs and bytes over device rates (compute tasks) and bytes over link
// bandwidth plus latency (comm tasks and the reshards inside compute tasks).
// Tensor shapes in the op graph are per microbatch already, so a task's
// estimate is that of one microbatch. docs/cost-model.md writes it down:
//
// A compute task takes, summed over its ops,
//   max(flops / flops_rate, bytes read and written / memory_bandwidth) + op_overhead,
// the bfloat16 rate for an op that reads a bfloat16 tensor, the float32 one otherwise;
// its reshards (piper.AllReduce, piper.ReduceScatter, piper.AllGather, piper.AllToAll
// over the device's tensor-parallel group, or the task's replicas under expert
// parallelism) are collectives, not kernels.
// A collective over n ranks moving B bytes takes
//   link.latency + factor * B / link.bandwidth,
// factor 2(n-1)/n for a ring all-reduce, (n-1)/n for reduce-scatter,
// all-gather and all-to-all (B the whole, unsharded tensor), 1 for send,
// recv and broadcast; nothing when n = 1. The link is the slowest its ranks
// span: within a node when all are on one (Cluster::link), else across nodes.
// Where the rates carry measured curves (formats/measured_costs.h, piper-run
// --profile-costs), a kernel takes its op type's curve (or its class's) at its FLOPs
// or bytes, and a collective within one node its kind's and group size's curve at B.
#pragma once

#include <string>
#include <vector>

#include "formats/cluster.h"
#include "planner/ir/task_graph.h"

namespace piper::planner::sim {

// Rates of the devices and links (formats/cluster.h: piper-plan's flags or --cluster FILE).
using DeviceRates = formats::Cluster;

// Floating-point operations of one op: 2*M*N*K for MatMul, Gemm and
// piper.MatMul (batch dimensions multiply), 2 per multiply-add for Einsum and
// the fused attention ops, a few per element for elementwise, normalisation
// and optimizer ops, none for ops that only move or reshape data.
double op_flops(const ir::OpGraph& graph, const ir::Op& op);

// Floating-point operations of a compute task's kernels (op_flops over its ops, its reshards
// left out): what one device computes for one instance of the task.
double task_flops(const ir::TaskGraph& graph, const ir::Task& task);

// Bytes an op reads (its inputs) plus writes (its outputs).
double op_bytes(const ir::OpGraph& graph, const ir::Op& op);

// Bytes a comm task moves: the tensors of send, recv, all-reduce, broadcast
// and all-to-all; the unsharded side (the larger tensor of each pair) of
// reduce-scatter and all-gather.
double comm_bytes(const ir::TaskGraph& graph, const ir::Task& task);

// Seconds one kernel takes (not for reshards, which task_seconds prices as collectives).
double op_seconds(const ir::OpGraph& graph, const ir::Op& op, const DeviceRates& rates);

// Seconds a collective or transfer of `kind` takes over `ranks` moving `bytes` (see above).
double collective_seconds(ir::TaskKind kind, const std::vector<int>& ranks, double bytes,
                          const DeviceRates& rates);

// A reshard of a compute task and when it runs, in seconds from the task's start.
struct ReshardSpan {
  ir::OpId op = -1;
  ir::TaskKind kind = ir::TaskKind::kAllReduce;
  double start = 0;
  double end = 0;
};

// Walks the compute task's ops in order on DAG device `device`, kernels at the device's
// rates and reshards as collectives over its tensor-parallel group (those over the replicas,
// ir::runs_over_replicas, over the task's replicas): appends each reshard's
// span to `spans` when not null and returns the device's time for the task.
double reshard_spans(const ir::TaskGraph& graph, const ir::Task& task, int device,
                     const DeviceRates& rates, std::vector<ReshardSpan>* spans);

// Seconds one instance of task `id` takes on one of its devices (a compute task: its
// slowest device's).
double task_seconds(const ir::TaskGraph& graph, ir::TaskId id, const DeviceRates& rates);

// Seconds an overlapped pair of compute tasks (overlapped_pairs.h) takes on their devices,
// DualPipe's F&B: the two share the device's compute, so their kernel times K add up, and the
// reshards of each (expert parallelism's all-to-alls, tensor parallelism's all-reduces), R,
// hide under the other's kernels as far as those last:
//   F&B = K_a + K_b + max(0, R_a - K_b) + max(0, R_b - K_a),
// on the pair's slowest device. Without reshards F&B = F + B.
double pair_seconds(const ir::TaskGraph& graph, ir::TaskId a, ir::TaskId b,
                    const DeviceRates& rates);

}  // namespace piper::planner::sim
