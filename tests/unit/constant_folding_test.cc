#include <gtest/gtest.h>

#include "formats/error.h"
#include "onnx_builder.h"
#include "planner/import/import.h"

namespace piper::planner {
namespace {

using testing::OnnxBuilder;

// What torch.onnx.export emits for x.view(x.size(0), -1) with a dynamic batch.
OnnxBuilder dynamic_flatten_model() {
  OnnxBuilder b;
  b.input("x", {-1, 3, 4}).output("loss", {});
  b.node("Shape", {"x"}, {"shape"});
  auto& index = b.node("Constant", {}, {"zero"});
  auto* value = index.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  value->mutable_t()->add_int64_data(0);
  b.node("Gather", {"shape", "zero"}, {"batch"});
  b.int_initializer("axes", {1}, {0});
  b.node("Unsqueeze", {"batch", "axes"}, {"batch1"});
  b.int_initializer("minus_one", {1}, {-1});
  b.node("Concat", {"batch1", "minus_one"}, {"target"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto axis;
    axis.set_name("axis");
    axis.set_type(onnx::AttributeProto::INT);
    axis.set_i(0);
    return axis;
  }());
  b.node("Reshape", {"x", "target"}, {"flat"});
  b.initializer("w", {12, 1}, std::vector<float>(12, 0.5f));
  b.node("MatMul", {"flat", "w"}, {"y"});
  b.node("ReduceMean", {"y"}, {"loss"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto keepdims;
    keepdims.set_name("keepdims");
    keepdims.set_type(onnx::AttributeProto::INT);
    keepdims.set_i(0);
    return keepdims;
  }());
  return b;
}

TEST(ConstantFolding, FoldsTheDynamicBatchShapeChain) {
  const ir::OpGraph graph = import_model(dynamic_flatten_model().model(), {.batch = 5}, "m.onnx");
  std::vector<std::string> types;
  for (const ir::Op& op : graph.ops()) types.push_back(op.type);
  EXPECT_EQ(types, (std::vector<std::string>{"Reshape", "MatMul", "ReduceMean"}));
  const ir::Op& reshape = graph.op(0);
  EXPECT_EQ(graph.tensor(reshape.outputs[0]).shape, (ir::Shape{5, 12}));
  const ir::Tensor& target = graph.tensor(reshape.inputs[1]);
  EXPECT_EQ(target.role, ir::Role::kConstant);
  ASSERT_EQ(target.data.size(), 2 * sizeof(int64_t));
  int64_t values[2];
  std::memcpy(values, target.data.data(), sizeof(values));
  EXPECT_EQ(values[0], 5);
  EXPECT_EQ(values[1], -1);
  EXPECT_EQ(graph.tensor(graph.loss).shape, ir::Shape{});
}

TEST(ConstantFolding, TrainedInitializersAreNeverFoldedThrough) {
  OnnxBuilder b;
  b.input("x", {-1, 2}).output("loss", {});
  b.initializer("w", {2, 2}, {1, 2, 3, 4});
  b.node("Transpose", {"w"}, {"wt"});
  b.node("MatMul", {"x", "wt"}, {"y"});
  b.node("ReduceSum", {"y"}, {"loss"});
  const ir::OpGraph graph = import_model(b.model(), {.batch = 3}, "m.onnx");
  ASSERT_EQ(graph.num_ops(), 3);
  EXPECT_EQ(graph.tensor(graph.op(0).inputs[0]).role, ir::Role::kParameter);
}

TEST(ConstantFolding, FrozenInitializersAreConstants) {
  OnnxBuilder b;
  b.input("x", {-1, 2}).output("loss", {});
  b.initializer("mask", {2}, {1, 0});
  b.initializer("w", {2}, {1, 1});
  b.node("Mul", {"x", "mask"}, {"masked"});
  b.node("Mul", {"masked", "w"}, {"y"});
  b.node("ReduceSum", {"y"}, {"loss"});
  ImportOptions options{.batch = 2, .is_frozen = [](const std::string& n) { return n == "mask"; }};
  const ir::OpGraph graph = import_model(b.model(), options, "m.onnx");
  const ir::Tensor& mask = graph.tensor(*graph.find_tensor("mask"));
  EXPECT_EQ(mask.role, ir::Role::kConstant);
  EXPECT_EQ(mask.initializer, "mask");
  EXPECT_EQ(graph.tensor(*graph.find_tensor("w")).role, ir::Role::kParameter);
}

TEST(Import, BakedInBatchThatDiffersIsRejectedWithAdvice) {
  OnnxBuilder b;
  b.input("x", {8, 2}).output("loss", {});
  b.initializer("w", {2}, {1, 1});
  b.node("Mul", {"x", "w"}, {"y"});
  b.node("ReduceSum", {"y"}, {"loss"});
  try {
    import_model(b.model(), {.batch = 4}, "fixed.onnx");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("fixed.onnx"), std::string::npos) << message;
    EXPECT_NE(message.find("'x'"), std::string::npos) << message;
    EXPECT_NE(message.find("dynamic_axes"), std::string::npos) << message;
  }
}

TEST(Import, ModelWithoutScalarLossIsRejected) {
  OnnxBuilder b;
  b.input("x", {-1, 2}).output("y", {-1, 2});
  b.initializer("w", {2}, {1, 1});
  b.node("Mul", {"x", "w"}, {"y"});
  EXPECT_THROW(import_model(b.model(), {.batch = 4}, "m.onnx"), Error);
}

}  // namespace
}  // namespace piper::planner
