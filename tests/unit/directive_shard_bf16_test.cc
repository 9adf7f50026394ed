// Tensor parallelism in bf16 on samples/gpt (Megatron's plan): a product whose result is a
// partial sum over the group writes its float32 sum, the collective adds the members' sums in
// float32, and a Cast rounds the whole sum to bfloat16 once, as one process rounds its whole
// product. Numerics against one process: tests/integration/test_tensor_parallel.py.
#include <gtest/gtest.h>

#include "directive_fixture.h"
#include "gpt_sample.h"
#include "planner/fusion/fusion.h"
#include "planner/ir/placement.h"
#include "planner/ir/text.h"
#include "planner/precision/precision.h"

namespace piper {
namespace {

constexpr int kLayers = 2;

ir::TaskGraph gpt_bf16_task_graph() {
  ir::OpGraph graph = testing::import_gpt_sample(2);
  planner::fuse(graph, planner::default_fusion_rules());
  planner::insert_bf16_casts(graph);
  planner::differentiate(graph);
  planner::add_optimizer(
      graph, strategy::parse_strategy(R"({"batch": {"global": 2}, "optimizer": {"type": "adamw"}})",
                                      "test.json")
                 .optimizer);
  return ir::build_task_graph(std::move(graph));
}

std::string megatron_shard(bool sequence_parallel) {
  return std::string(R"([{"op": "shard", "devices": [0, 1], "sequence_parallel": )") +
         (sequence_parallel ? "true" : "false") + R"(, "params": {
      "blocks.*.attn.q.*": 0, "blocks.*.attn.k.weight": 0, "blocks.*.attn.v.*": 0,
      "blocks.*.attn.proj.weight": 1, "blocks.*.mlp.fc.*": 0, "blocks.*.mlp.out.weight": 1}}])";
}

bool is_sum_collective(const ir::Op& op) {
  return op.type == "piper.AllReduce" || op.type == "piper.ReduceScatter";
}

// The op reading `tensor` that is not a layout change (Transpose), following those.
const ir::Op* first_reader(const ir::OpGraph& ops, ir::TensorId tensor) {
  for (const ir::OpId id : ops.consumers(tensor)) {
    const ir::Op& op = ops.op(id);
    if (op.type == "Transpose") return first_reader(ops, op.outputs[0]);
    return &op;
  }
  return nullptr;
}

void expect_sums_rounded_once(bool sequence_parallel, const std::string& kind,
                              int forward_per_layer, int backward_per_layer) {
  SCOPED_TRACE(sequence_parallel ? "sequence parallel" : "tensor parallel");
  ir::TaskGraph graph = gpt_bf16_task_graph();
  testing::apply_directives(graph, megatron_shard(sequence_parallel));
  const ir::OpGraph& ops = graph.op_graph();
  // No member ever holds a bfloat16 partial sum: nothing is rounded before the sum.
  for (const ir::Tensor& tensor : ops.tensors()) {
    EXPECT_FALSE(tensor.dtype == ir::DType::kBFloat16 && tensor.placement.is_partial())
        << tensor.name;
  }
  int forward = 0, backward = 0, rounded_gradients = 0;
  for (const ir::Op& op : ops.ops()) {
    if (op.type == "Cast" && op.pass == ir::Pass::kBackward && op.name.ends_with("/rounded_sum")) {
      ++rounded_gradients;
    }
    if (!is_sum_collective(op)) continue;
    const ir::Tensor& sum = ops.tensor(op.outputs[0]);
    EXPECT_EQ(sum.dtype, ir::DType::kFloat32) << op.name;
    if (op.type != kind || sum.shape.size() != 3) continue;  // the loss, the norm's terms
    (op.pass == ir::Pass::kForward ? forward : backward) += 1;
    if (op.pass != ir::Pass::kForward) continue;
    // The forward's sum takes its bias in float32 first, as the fused product adds it; then
    // one Cast rounds it to the bfloat16 the product wrote in one process.
    const ir::Op* add = first_reader(ops, op.outputs[0]);
    ASSERT_NE(add, nullptr) << op.name;
    EXPECT_EQ(add->type, "Add") << op.name;
    EXPECT_EQ(ops.tensor(add->outputs[0]).dtype, ir::DType::kFloat32) << add->name;
    const ir::Op* cast = first_reader(ops, add->outputs[0]);
    ASSERT_NE(cast, nullptr) << add->name;
    EXPECT_EQ(cast->type, "Cast") << add->name << " is read by " << cast->name;
    EXPECT_EQ(ops.tensor(cast->outputs[0]).dtype, ir::DType::kBFloat16) << cast->name;
  }
  // Megatron's forward sums (attention and MLP outputs); in the backward each column-parallel
  // product's input gradient (q, k, v, fc) is summed alone. One process rounds q's, k's and
  // v's to bfloat16 before adding them, so each sum is rounded once after the collective; fc's
  // product, the only reader of its input, writes float32 there too, and so is not rounded.
  EXPECT_EQ(forward, forward_per_layer * kLayers) << ir::print(graph);
  EXPECT_EQ(backward, backward_per_layer * kLayers) << ir::print(graph);
  EXPECT_EQ(rounded_gradients, 3 * kLayers) << ir::print(graph);
}

TEST(ShardBf16, PartialSumsAreAddedInFloat32AndRoundedOnce) {
  expect_sums_rounded_once(false, "piper.AllReduce", 2, 4);
}

TEST(ShardBf16, SequenceParallelReduceScattersInFloat32) {
  expect_sums_rounded_once(true, "piper.ReduceScatter", 2, 4);
}

// Placement of a Cast of a partial sum: widening is exact, so the members' casts add up to the
// cast of the sum; rounding to bfloat16 is not, so the sum must be whole first.
ir::OpPlacement place_cast(ir::DType from, ir::DType to) {
  ir::OpGraph graph;
  ir::Tensor x;
  x.name = "x";
  x.dtype = from;
  x.shape = {4, 8};
  ir::Tensor y = x;
  y.name = "y";
  y.dtype = to;
  ir::Op cast;
  cast.type = "Cast";
  cast.name = "cast";
  cast.inputs = {graph.add_tensor(x)};
  cast.outputs = {graph.add_tensor(y)};
  cast.attributes["to"] = ir::onnx_data_type(to);
  graph.add_op(cast);
  return ir::place_op(graph, cast, {ir::Placement::partial()}, {x.shape, y.shape}, 2);
}

TEST(ShardBf16, OnlyAWideningCastPassesAPartialSumOn) {
  const ir::OpPlacement widening = place_cast(ir::DType::kBFloat16, ir::DType::kFloat32);
  EXPECT_TRUE(widening.inputs[0].is_partial());
  EXPECT_TRUE(widening.outputs[0].is_partial());
  const ir::OpPlacement narrowing = place_cast(ir::DType::kFloat32, ir::DType::kBFloat16);
  EXPECT_TRUE(narrowing.inputs[0].is_replicated());
  EXPECT_TRUE(narrowing.outputs[0].is_replicated());
}

}  // namespace
}  // namespace piper
