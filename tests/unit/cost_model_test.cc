// The cost model: FLOPs and bytes of contractions and elementwise ops from
// their shapes, task times over device rates, comm times over links.
#include "planner/sim/cost_model.h"

#include <gtest/gtest.h>

#include "formats/error.h"
#include "planner/ir/text.h"

namespace piper::planner::sim {
namespace {

// x[32,64] · w1ᵀ (Gemm transB, w1 [128,64]) -> h[32,128]; relu; h · w2 [128,16] -> y.
const std::string kLayers = R"(
tensor x f32[32,64] input
tensor w1 f32[128,64] parameter
tensor h f32[32,128] activation
tensor a f32[32,128] activation
tensor w2 f32[128,16] parameter
tensor y f32[32,16] activation
tensor g f32[128,16] gradient
op 0 Gemm "/fc1/Gemm" (x, w1) -> (h) {transB=1}
op 1 Relu "/relu" (h) -> (a)
op 2 MatMul "/fc2/MatMul" (a, w2) -> (y)
op 3 piper.MatMul "/fc2/MatMul_grad_B" (a, y) -> (g) {transA=1} pass=B
)";

ir::TaskGraph layers() { return ir::build_task_graph(ir::parse(kLayers).op_graph()); }

TEST(CostModel, CountsTwoMNKFlopsForGemmAndMatMul) {
  const ir::TaskGraph graph = layers();
  const ir::OpGraph& ops = graph.op_graph();
  EXPECT_DOUBLE_EQ(op_flops(ops, ops.op(0)), 2.0 * 32 * 128 * 64);
  EXPECT_DOUBLE_EQ(op_flops(ops, ops.op(2)), 2.0 * 32 * 16 * 128);
  // transA: K is A's first dimension (the 32 rows).
  EXPECT_DOUBLE_EQ(op_flops(ops, ops.op(3)), 2.0 * 128 * 16 * 32);
  EXPECT_DOUBLE_EQ(op_flops(ops, ops.op(1)), 32.0 * 128);  // one per element
  EXPECT_DOUBLE_EQ(op_bytes(ops, ops.op(0)), 4.0 * (32 * 64 + 128 * 64 + 32 * 128));
}

TEST(CostModel, CountsATasksKernelsFlopsWithoutItsReshards) {
  const ir::TaskGraph graph = ir::build_task_graph(ir::parse(R"(
tensor x f32[32,64] input
tensor w f32[128,64] parameter
tensor h f32[32,128] activation
tensor s f32[32,128] activation
op 0 Gemm "/fc1/Gemm" (x, w) -> (h) {transB=1}
op 1 piper.AllReduce "/fc1/Gemm/all_reduce" (h) -> (s)
)")
                                                       .op_graph());
  ASSERT_EQ(graph.num_tasks(), 1);
  EXPECT_DOUBLE_EQ(task_flops(graph, graph.task(0)), 2.0 * 32 * 128 * 64);
  const ir::TaskGraph two = layers();
  const ir::OpGraph& ops = two.op_graph();
  EXPECT_DOUBLE_EQ(task_flops(two, two.task(0)) + task_flops(two, two.task(1)),
                   op_flops(ops, ops.op(0)) + op_flops(ops, ops.op(1)) + op_flops(ops, ops.op(2)) +
                       op_flops(ops, ops.op(3)));
}

TEST(CostModel, TakesTheSlowerOfFlopsAndBytesPlusOverheadPerOp) {
  const ir::TaskGraph graph = layers();
  const ir::OpGraph& ops = graph.op_graph();
  DeviceRates rates;
  rates.flops = 1e9;
  rates.memory_bandwidth = 1e9;
  rates.op_overhead = 1e-6;
  double expected = 0;
  for (const ir::Op& op : ops.ops()) {
    expected += std::max(op_flops(ops, op) / 1e9, op_bytes(ops, op) / 1e9) + 1e-6;
  }
  ASSERT_EQ(graph.num_tasks(), 2);  // F and B
  EXPECT_DOUBLE_EQ(task_seconds(graph, 0, rates) + task_seconds(graph, 1, rates), expected);
  // The Gemm is compute-bound at these rates: 524288 FLOPs vs 73728 bytes.
  EXPECT_GT(op_flops(ops, ops.op(0)), op_bytes(ops, ops.op(0)));
}

TEST(CostModel, CountsEinsumAndFusedAttention) {
  const ir::TaskGraph graph = ir::build_task_graph(ir::parse(R"(
tensor a f32[2,3,4] input
tensor b f32[2,4,5] input
tensor c f32[2,3,5] activation
tensor q f32[2,8,16] input
tensor kt f32[2,16,10] input
tensor v f32[2,10,4] input
tensor o f32[2,8,4] activation
op 0 Einsum "/einsum" (a, b) -> (c) {equation="bij,bjk->bik"}
op 1 piper.FusedAttention "/attn" (q, kt, v) -> (o)
)")
                                                       .op_graph());
  const ir::OpGraph& ops = graph.op_graph();
  EXPECT_DOUBLE_EQ(op_flops(ops, ops.op(0)), 2.0 * 2 * 3 * 4 * 5);
  // S = Q Kt (2·B·T·Tk·D), softmax (5·B·T·Tk), Y = P V (2·B·T·Tk·Dv).
  EXPECT_DOUBLE_EQ(op_flops(ops, ops.op(1)), 2.0 * 8 * 10 * (2 * 16 + 2 * 4 + 5));
}

TEST(CostModel, TimesCollectivesByRingVolumeAndLatency) {
  ir::TaskGraph graph = layers();
  ir::Task all_reduce;
  all_reduce.kind = ir::TaskKind::kAllReduce;
  all_reduce.devices = {0, 1, 2, 3};
  all_reduce.tensors = {6};  // g: 128·16·4 = 8192 bytes
  const ir::TaskId reduce = graph.add_task(all_reduce);
  ir::Task send;
  send.kind = ir::TaskKind::kSend;
  send.devices = {0};
  send.peer = 1;
  send.tensors = {5};  // y: 2048 bytes
  const ir::TaskId sent = graph.add_task(send);
  DeviceRates rates;
  rates.intra_node = {.bandwidth = 1e6, .latency = 1e-3};
  EXPECT_DOUBLE_EQ(comm_bytes(graph, graph.task(reduce)), 8192);
  EXPECT_DOUBLE_EQ(task_seconds(graph, reduce, rates), 1e-3 + 2.0 * 3 / 4 * 8192 / 1e6);
  EXPECT_DOUBLE_EQ(task_seconds(graph, sent, rates), 1e-3 + 2048 / 1e6);
  graph.task(reduce).devices = {0};  // nothing to reduce on one device
  EXPECT_DOUBLE_EQ(task_seconds(graph, reduce, rates), 0);
}

TEST(CostModel, RejectsRatesThatAreNotPositive) {
  DeviceRates rates;
  EXPECT_NO_THROW(rates.check());
  rates.inter_node.bandwidth = 0;
  EXPECT_THROW(rates.check(), Error);
  EXPECT_NE(DeviceRates{}.describe().find("100 GFLOP/s"), std::string::npos);
}

// Four ranks, two per node: an all-reduce over 0 and 1 stays within a node, over 1 and 2
// (or all four) it crosses; a send from 1 to 2 crosses too.
TEST(CostModel, PricesEachCollectiveByTheSlowestLinkItsRanksSpan) {
  ir::TaskGraph graph = layers();
  const auto add = [&](ir::TaskKind kind, std::vector<int> devices, int peer = -1) {
    ir::Task task;
    task.kind = kind;
    task.devices = std::move(devices);
    task.peer = peer;
    task.tensors = {6};  // g: 8192 bytes
    return graph.add_task(task);
  };
  const ir::TaskId within = add(ir::TaskKind::kAllReduce, {0, 1});
  const ir::TaskId across = add(ir::TaskKind::kAllReduce, {1, 2});
  const ir::TaskId all = add(ir::TaskKind::kAllReduce, {0, 1, 2, 3});
  const ir::TaskId gather = add(ir::TaskKind::kAllGather, {2, 3});
  graph.task(gather).tensors = {5, 6};  // y's shard gathered into g's 8192 bytes
  const ir::TaskId send_within = add(ir::TaskKind::kSend, {0}, 1);
  const ir::TaskId send_across = add(ir::TaskKind::kSend, {1}, 2);
  DeviceRates rates;
  rates.devices_per_node = 2;
  rates.intra_node = {.bandwidth = 100e9, .latency = 2e-6};
  rates.inter_node = {.bandwidth = 10e9, .latency = 10e-6};
  EXPECT_DOUBLE_EQ(task_seconds(graph, within, rates), 2e-6 + 2.0 * 1 / 2 * 8192 / 100e9);
  EXPECT_DOUBLE_EQ(task_seconds(graph, across, rates), 10e-6 + 2.0 * 1 / 2 * 8192 / 10e9);
  EXPECT_DOUBLE_EQ(task_seconds(graph, all, rates), 10e-6 + 2.0 * 3 / 4 * 8192 / 10e9);
  EXPECT_DOUBLE_EQ(task_seconds(graph, gather, rates), 2e-6 + 1.0 / 2 * 8192 / 100e9);
  EXPECT_DOUBLE_EQ(task_seconds(graph, send_within, rates), 2e-6 + 8192 / 100e9);
  EXPECT_DOUBLE_EQ(task_seconds(graph, send_across, rates), 10e-6 + 8192 / 10e9);
  rates.devices_per_node = 0;  // one node: every link is the intra-node one
  EXPECT_DOUBLE_EQ(task_seconds(graph, all, rates), 2e-6 + 2.0 * 3 / 4 * 8192 / 100e9);
}

// A reshard inside a compute task is a collective over the device's tensor-parallel group,
// not a kernel: with DAG devices 0 and 1 standing for rank groups {0, 1} and {2, 3}, one
// node each, an all-reduce of y (2048 bytes) costs the intra-node ring; with groups {0, 2}
// and {1, 3} the inter-node one. The Gemm before it stays a kernel.
TEST(CostModel, PricesReshardsInsideComputeTasksByTheirGroupsLink) {
  const ir::TaskGraph base = ir::build_task_graph(ir::parse(R"(
tensor x f32[32,64] input
tensor w f32[16,64] parameter
tensor p f32[32,16] activation
tensor y f32[32,16] activation
op 0 Gemm "/fc/Gemm" (x, w) -> (p) {transB=1}
op 1 piper.AllReduce "/fc/tp_all_reduce" (p) -> (y)
)")
                                                      .op_graph());
  ASSERT_EQ(base.num_tasks(), 1);
  DeviceRates rates;
  rates.devices_per_node = 2;
  rates.intra_node = {.bandwidth = 1e9, .latency = 1e-6};
  rates.inter_node = {.bandwidth = 1e8, .latency = 1e-5};
  const ir::OpGraph& ops = base.op_graph();
  const double gemm = op_seconds(ops, ops.op(0), rates);
  const double ring = 2.0 * 1 / 2 * 2048;  // 2(n-1)/n of y's bytes, n = 2
  ir::TaskGraph within = base;
  within.shard_groups = {{0, 1}, {2, 3}};
  within.task(0).devices = {0, 1};
  EXPECT_DOUBLE_EQ(task_seconds(within, 0, rates), gemm + 1e-6 + ring / 1e9);
  ir::TaskGraph across = base;
  across.shard_groups = {{0, 2}, {1, 3}};
  across.task(0).devices = {0, 1};
  EXPECT_DOUBLE_EQ(task_seconds(across, 0, rates), gemm + 1e-5 + ring / 1e8);
  // One replica's group crossing nodes makes the task as slow as that replica.
  ir::TaskGraph mixed = base;
  mixed.shard_groups = {{0, 1}, {2, 4}};
  mixed.task(0).devices = {0, 1};
  EXPECT_DOUBLE_EQ(task_seconds(mixed, 0, rates), gemm + 1e-5 + ring / 1e8);
}

// Under expert parallelism a reshard (the dispatch all-to-all) runs over the task's
// replicas: devices 0 and 1 cost the intra-node ring on one node of two, the inter-node one
// on nodes of one.
TEST(CostModel, PricesExpertParallelReshardsOverTheTasksReplicas) {
  ir::TaskGraph graph = ir::build_task_graph(ir::parse(R"(
tensor x f32[32,16] input
tensor y f32[32,16] activation
op 0 piper.AllToAll "/moe/dispatch" (x) -> (y) {over="replicas"}
)")
                                                 .op_graph());
  graph.op_graph().replica_group = 2;
  graph.task(0).devices = {0, 1};
  DeviceRates rates;
  rates.intra_node = {.bandwidth = 1e9, .latency = 1e-6};
  rates.inter_node = {.bandwidth = 1e8, .latency = 1e-5};
  rates.devices_per_node = 2;
  const double share = 1.0 / 2 * 2048;  // (n-1)/n of x's bytes, n = 2
  EXPECT_DOUBLE_EQ(task_seconds(graph, 0, rates), 1e-6 + share / 1e9);
  rates.devices_per_node = 1;
  EXPECT_DOUBLE_EQ(task_seconds(graph, 0, rates), 1e-5 + share / 1e8);
}

// A profile of products (by FLOPs) and Add (by bytes), and of 2-rank all-reduces.
DeviceRates measured_rates() {
  DeviceRates rates;
  rates.flops = 1e9;
  rates.memory_bandwidth = 1e9;
  rates.op_overhead = 1e-3;
  rates.intra_node = {.bandwidth = 1e6, .latency = 1e-3};
  rates.measured.kernels = {
      {"piper.MatMul", "float32", formats::CostKey::kFlops, {{{1e5, 1e-5}, {1e7, 1e-4}}}, {}},
      {"Add", "float32", formats::CostKey::kBytes, {{{1e3, 2e-6}, {1e6, 1e-4}}}, {}},
  };
  rates.measured.collectives = {
      {formats::CollectiveKind::kAllReduce, 2, {{{1024, 5e-5}, {1 << 20, 1e-3}}}},
  };
  return rates;
}

TEST(CostModel, PricesMeasuredKernelsOffTheirCurves) {
  const ir::TaskGraph graph = layers();
  const ir::OpGraph& ops = graph.op_graph();
  const DeviceRates rates = measured_rates();
  // Gemm and MatMul are contractions: the piper.MatMul curve at their FLOPs (no overhead: the
  // curve holds the whole kernel).
  const formats::MeasuredCurve& products = rates.measured.kernels[0].curve;
  EXPECT_DOUBLE_EQ(op_seconds(ops, ops.op(0), rates), products.seconds(op_flops(ops, ops.op(0))));
  EXPECT_DOUBLE_EQ(op_seconds(ops, ops.op(3), rates), products.seconds(op_flops(ops, ops.op(3))));
  // Relu was not measured: priced as the element-wise Add, by bytes.
  EXPECT_DOUBLE_EQ(op_seconds(ops, ops.op(1), rates),
                   rates.measured.kernels[1].curve.seconds(op_bytes(ops, ops.op(1))));
  // Without an Add curve, an unmeasured op takes the rates.
  DeviceRates products_only = rates;
  products_only.measured.kernels.pop_back();
  EXPECT_DOUBLE_EQ(op_seconds(ops, ops.op(1), products_only),
                   op_bytes(ops, ops.op(1)) / 1e9 + 1e-3);
}

// Products measured on a grid of shapes: each seconds entry m * n * k * 1e-9 (at 1 GFLOP/s per
// multiply-add pair), but "nt" twice as slow; no "tn".
formats::MeasuredProducts products_grid() {
  formats::MeasuredProducts grid{"float32", {16, 64, 256}, {}, {}};
  for (const char* layout : {"nn", "nt"}) {
    std::vector<double>& seconds = grid.seconds[layout];
    for (double m : grid.sizes) {
      for (double n : grid.sizes) {
        for (double k : grid.sizes) {
          seconds.push_back(m * n * k * 1e-9 * (std::string(layout) == "nt" ? 2 : 1));
        }
      }
    }
  }
  return grid;
}

TEST(CostModel, PricesProductsByTheirShapeWhereTheProfileHasAGrid) {
  const ir::TaskGraph graph = ir::build_task_graph(ir::parse(kLayers + R"(
tensor xs f32[4,8,64] input
tensor ys f32[4,8,128] activation
tensor bs f32[4,64,128] input
tensor zs f32[4,8,128] activation
tensor e f32[32,128] activation
op 4 piper.MatMul "/batched/shared_B" (xs, w1) -> (ys) {transB=1}
op 5 MatMul "/batched/own_B" (xs, bs) -> (zs)
op 6 Einsum "/einsum" (x, w1) -> (e) {equation="ij,kj->ik"}
)")
                                                       .op_graph());
  const ir::OpGraph& ops = graph.op_graph();
  DeviceRates rates = measured_rates();
  rates.measured.products = {products_grid()};
  const formats::MeasuredProducts& grid = rates.measured.products[0];
  // Gemm with transB: [32, 64] x [64, 128] read as "nt", on the grid's power law.
  EXPECT_DOUBLE_EQ(op_seconds(ops, ops.op(0), rates), grid.product_seconds(32, 128, 64, "nt"));
  EXPECT_NEAR(op_seconds(ops, ops.op(0), rates), 2 * 32 * 128 * 64 * 1e-9, 1e-15);
  // transA, which the grid lacks: priced as "nn". m = 128, n = 16, k = the 32 rows.
  EXPECT_NEAR(op_seconds(ops, ops.op(3), rates), 128 * 16 * 32 * 1e-9, 1e-15);
  // Below the grid a size costs as the first (16 for n = 16 and 8 alike); above it, in
  // proportion: 4 batches sharing B fold into one product of 32 rows; 4 with their own B
  // are 4 products of 8 rows, each priced as 16.
  EXPECT_NEAR(op_seconds(ops, ops.op(4), rates), 2 * 32 * 128 * 64 * 1e-9, 1e-15);
  EXPECT_NEAR(op_seconds(ops, ops.op(5), rates), 4 * 16 * 128 * 64 * 1e-9, 1e-15);
  EXPECT_NEAR(grid.product_seconds(1024, 16, 16, "nn"), 1024 * 16 * 16 * 1e-9, 1e-15);
  // An Einsum is no product of the grid: the FLOPs curve prices it.
  EXPECT_DOUBLE_EQ(op_seconds(ops, ops.op(6), rates),
                   rates.measured.kernels[0].curve.seconds(op_flops(ops, ops.op(6))));
  // No grid in bfloat16: a bfloat16 product falls back to the curves and rates.
  EXPECT_EQ(rates.measured.products_in("bfloat16"), nullptr);
}

TEST(CostModel, PricesMeasuredCollectivesWithinANodeAndTheRatesAcross) {
  ir::TaskGraph graph = layers();
  ir::Task all_reduce;
  all_reduce.kind = ir::TaskKind::kAllReduce;
  all_reduce.devices = {0, 1};
  all_reduce.tensors = {6};  // g: 8192 bytes
  const ir::TaskId reduce = graph.add_task(all_reduce);
  DeviceRates rates = measured_rates();
  EXPECT_DOUBLE_EQ(task_seconds(graph, reduce, rates),
                   rates.measured.collectives[0].curve.seconds(8192));
  // Four ranks were not measured: the ring over the link.
  graph.task(reduce).devices = {0, 1, 2, 3};
  EXPECT_DOUBLE_EQ(task_seconds(graph, reduce, rates), 1e-3 + 2.0 * 3 / 4 * 8192 / 1e6);
  // Two ranks on two nodes: the inter-node link, not the curve measured within one.
  graph.task(reduce).devices = {0, 1};
  rates.devices_per_node = 1;
  rates.inter_node = {.bandwidth = 1e5, .latency = 1e-2};
  EXPECT_DOUBLE_EQ(task_seconds(graph, reduce, rates), 1e-2 + 8192 / 1e5);
}

TEST(CostModel, RunsBfloat16KernelsAtTheBfloat16Rate) {
  const ir::TaskGraph graph = ir::build_task_graph(ir::parse(R"(
tensor a bf16[64,64] input
tensor b bf16[64,64] input
tensor c bf16[64,64] activation
tensor d f32[64,64] input
tensor e f32[64,64] activation
op 0 MatMul "/bf16" (a, b) -> (c)
op 1 MatMul "/f32" (d, d) -> (e)
)")
                                                       .op_graph());
  const ir::OpGraph& ops = graph.op_graph();
  DeviceRates rates;
  rates.flops = 1e9;
  rates.bfloat16_flops = 8e9;
  rates.memory_bandwidth = 1e15;  // compute-bound
  rates.op_overhead = 0;
  const double flops = 2.0 * 64 * 64 * 64;
  EXPECT_DOUBLE_EQ(op_seconds(ops, ops.op(0), rates), flops / 8e9);
  EXPECT_DOUBLE_EQ(op_seconds(ops, ops.op(1), rates), flops / 1e9);
}

}  // namespace
}  // namespace piper::planner::sim
