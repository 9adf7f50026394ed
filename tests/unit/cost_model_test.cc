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
  rates.link_bandwidth = 1e6;
  rates.link_latency = 1e-3;
  EXPECT_DOUBLE_EQ(comm_bytes(graph, graph.task(reduce)), 8192);
  EXPECT_DOUBLE_EQ(task_seconds(graph, reduce, rates), 1e-3 + 2.0 * 3 / 4 * 8192 / 1e6);
  EXPECT_DOUBLE_EQ(task_seconds(graph, sent, rates), 1e-3 + 2048 / 1e6);
  graph.task(reduce).devices = {0};  // nothing to reduce on one device
  EXPECT_DOUBLE_EQ(task_seconds(graph, reduce, rates), 0);
}

TEST(CostModel, RejectsRatesThatAreNotPositive) {
  DeviceRates rates;
  EXPECT_NO_THROW(rates.check());
  rates.link_bandwidth = 0;
  EXPECT_THROW(rates.check(), Error);
  EXPECT_NE(DeviceRates{}.describe().find("100 GFLOP/s"), std::string::npos);
}

}  // namespace
}  // namespace piper::planner::sim
