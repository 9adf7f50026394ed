// The precision rewrites on samples/gpt: where bf16 puts casts, which dtypes the training graph
// then has, and tf32's marks.
#include "planner/precision/precision.h"

#include <gtest/gtest.h>

#include <set>

#include "gpt_sample.h"
#include "planner/autodiff/autodiff.h"
#include "planner/fusion/fusion.h"
#include "planner/ir/task_graph.h"
#include "planner/ir/verify.h"

namespace piper {
namespace {

ir::OpGraph gpt_forward() {
  ir::OpGraph graph = testing::import_gpt_sample(2);
  planner::fuse(graph, planner::default_fusion_rules());
  return graph;
}

bool is_float32_scalar_constant(const ir::Tensor& tensor) {
  return tensor.role == ir::Role::kConstant && tensor.dtype == ir::DType::kFloat32 &&
         ir::num_elements(tensor.shape) == 1;
}

// The dtypes of an op's float inputs, leaving out float32 scalar constants.
std::set<ir::DType> float_input_dtypes(const ir::OpGraph& graph, const ir::Op& op) {
  std::set<ir::DType> dtypes;
  for (ir::TensorId input : op.inputs) {
    if (input < 0) continue;
    const ir::Tensor& tensor = graph.tensor(input);
    if (ir::is_float(tensor.dtype) && !is_float32_scalar_constant(tensor)) {
      dtypes.insert(tensor.dtype);
    }
  }
  return dtypes;
}

TEST(Precision, Bf16RunsProductsInBfloat16AndNormalizationAndLossInFloat32) {
  ir::OpGraph graph = gpt_forward();
  planner::insert_bf16_casts(graph);
  const std::set<ir::DType> bf16 = {ir::DType::kBFloat16};
  const std::set<ir::DType> f32 = {ir::DType::kFloat32};
  int products = 0;
  for (const ir::Op& op : graph.ops()) {
    if (op.type == "Cast") continue;
    const std::set<ir::DType> dtypes = float_input_dtypes(graph, op);
    EXPECT_LE(dtypes.size(), 1u) << op.name << " (" << op.type << ") mixes float dtypes";
    if (op.type == "piper.MatMul" || op.type == "piper.FusedAttention") {
      ++products;
      EXPECT_EQ(dtypes, bf16) << op.name;
      EXPECT_EQ(graph.tensor(op.outputs[0]).dtype, ir::DType::kBFloat16) << op.name;
    }
    if (op.type == "LayerNormalization" || op.type == "SoftmaxCrossEntropyLoss") {
      EXPECT_EQ(dtypes, f32) << op.name;
    }
  }
  // q, k, v, attention, proj, fc1, fc2 per layer; the head (Linear layers are piper.MatMul).
  EXPECT_EQ(products, 2 * 7 + 1);
  for (const ir::Tensor& tensor : graph.tensors()) {
    if (tensor.role == ir::Role::kParameter) {
      EXPECT_EQ(tensor.dtype, ir::DType::kFloat32) << tensor.name;
    }
  }
  EXPECT_EQ(graph.tensor(graph.loss).dtype, ir::DType::kFloat32);
}

TEST(Precision, Bf16CastsJoinTheirReadersTasks) {
  ir::OpGraph graph = gpt_forward();
  planner::insert_bf16_casts(graph);
  int casts = 0;
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    const ir::Op& op = graph.op(id);
    if (op.type != "Cast" || graph.tensor(op.outputs[0]).dtype == ir::DType::kBool) continue;
    ++casts;
    for (ir::OpId reader : graph.consumers(op.outputs[0])) {
      EXPECT_EQ(graph.op(reader).tags, op.tags) << op.name << " -> " << graph.op(reader).name;
    }
  }
  EXPECT_GT(casts, 0);
}

TEST(Precision, Bf16TrainsFloat32MasterWeights) {
  ir::OpGraph graph = gpt_forward();
  planner::insert_bf16_casts(graph);
  planner::differentiate(graph);
  int gradient_casts = 0;
  for (const ir::Op& op : graph.ops()) {
    if (op.pass != ir::Pass::kForward && op.type == "Cast") ++gradient_casts;
    // The attention gradient also reads the forward's float32 row statistics.
    if (op.pass == ir::Pass::kForward || op.type == "Cast" ||
        op.type == "piper.FusedAttentionGrad") {
      continue;
    }
    EXPECT_LE(float_input_dtypes(graph, op).size(), 1u) << op.name << " mixes float dtypes";
  }
  EXPECT_GT(gradient_casts, 0);
  ASSERT_FALSE(graph.trained.empty());
  for (const ir::TrainedParameter& trained : graph.trained) {
    EXPECT_EQ(graph.tensor(trained.gradient).dtype, ir::DType::kFloat32)
        << graph.tensor(trained.gradient).name;
  }
  // A weight's gradient product writes float32 itself: no Cast rounds it to bfloat16 first.
  for (const ir::Op& op : graph.ops()) {
    if (op.type != "Cast" || op.pass == ir::Pass::kForward) continue;
    const ir::OpId producer = graph.producer(op.inputs[0]);
    ASSERT_GE(producer, 0);
    EXPECT_NE(graph.op(producer).type, "MatMul") << op.name;
    EXPECT_NE(graph.op(producer).type, "piper.BiasGeluGrad") << op.name;
  }
  // Nor does the fused bias-GELU's bias gradient (replicas would round their parts before
  // their sum); its input gradient stays bfloat16.
  int bias_gelu_gradients = 0;
  for (const ir::Op& op : graph.ops()) {
    if (op.type != "piper.BiasGeluGrad") continue;
    ++bias_gelu_gradients;
    ASSERT_EQ(op.outputs.size(), 2u) << op.name;
    EXPECT_EQ(graph.tensor(op.outputs[0]).dtype, ir::DType::kBFloat16) << op.name;
    EXPECT_EQ(graph.tensor(op.outputs[1]).dtype, ir::DType::kFloat32) << op.name;
  }
  EXPECT_EQ(bias_gelu_gradients, 2);
  ir::verify_or_throw(ir::build_task_graph(std::move(graph)), "after bf16 casts");
}

// cuDNN's flash attention backward takes dY, Q, K, V and the forward's Y in one dtype.
TEST(Precision, Bf16AttentionGradientReadsYAndItsOperandsInBfloat16) {
  ir::OpGraph graph = gpt_forward();
  planner::insert_bf16_casts(graph);
  planner::differentiate(graph);
  int gradients = 0;
  for (const ir::Op& op : graph.ops()) {
    if (op.type != "piper.FusedAttentionGrad") continue;
    ++gradients;
    ASSERT_EQ(op.inputs.size(), 8u) << op.name;
    const ir::OpId forward = graph.producer(op.inputs[7]);
    ASSERT_GE(forward, 0) << op.name;
    EXPECT_EQ(graph.op(forward).type, "piper.FusedAttention") << op.name;
    EXPECT_EQ(graph.op(forward).inputs[0], op.inputs[1]) << op.name << ": Y of the same attention";
    for (size_t i : {0, 1, 2, 3, 7}) {
      EXPECT_EQ(graph.tensor(op.inputs[i]).dtype, ir::DType::kBFloat16)
          << op.name << " input " << i;
    }
  }
  EXPECT_EQ(gradients, 2);
}

TEST(Precision, Tf32MarksEveryMatrixProduct) {
  ir::OpGraph graph = gpt_forward();
  planner::differentiate(graph);
  planner::allow_tf32(graph);
  int marked = 0;
  for (const ir::Op& op : graph.ops()) {
    const bool product = op.type == "MatMul" || op.type == "piper.MatMul" ||
                         op.type == "piper.FusedAttention" || op.type == "piper.FusedAttentionGrad";
    EXPECT_EQ(ir::attr_int(op.attributes, "tf32", 0), product ? 1 : 0) << op.name;
    marked += product;
  }
  EXPECT_GT(marked, 2 * 7 + 1);
}

}  // namespace
}  // namespace piper
