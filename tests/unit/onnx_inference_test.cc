// formats::inference_model (piper-export --inference): where a training model is cut.
#include "formats/onnx_inference.h"

#include <gtest/gtest.h>

#include "formats/error.h"
#include "onnx_builder.h"

namespace piper::formats {
namespace {

std::vector<std::string> node_types(const onnx::ModelProto& model) {
  std::vector<std::string> types;
  for (const auto& node : model.graph().node()) types.push_back(node.op_type());
  return types;
}

std::vector<std::string> input_names(const onnx::ModelProto& model) {
  std::vector<std::string> names;
  for (const auto& input : model.graph().input()) names.push_back(input.name());
  return names;
}

// x [batch, 2] @ w, transposed by a weight-only Transpose (a tied embedding's head), then a
// reshape of the logits and a squared error against the labels y.
testing::OnnxBuilder tied_head_model() {
  testing::OnnxBuilder builder;
  builder.input("x", {-1, 2}).input("y", {-1, 3}).output("loss", {});
  builder.initializer("w", {3, 2}, {1, 2, 3, 4, 5, 6}).int_initializer("shape", {2}, {-1, 3});
  builder.node("Transpose", {"w"}, {"wt"});
  builder.node("MatMul", {"x", "wt"}, {"z"}, "head");
  builder.node("Reshape", {"z", "shape"}, {"flat"});
  builder.node("Sub", {"flat", "y"}, {"d"}, "error");
  builder.node("Mul", {"d", "d"}, {"e"});
  testing::OnnxBuilder::attr(builder.node("ReduceMean", {"e"}, {"loss"}), "keepdims", int64_t{0});
  return builder;
}

TEST(InferenceModel, CutsAtTheLogitsPastWeightOnlyNodesAndReshapesOfTheLoss) {
  const onnx::ModelProto cut = inference_model(tied_head_model().model(), {"w"}, "", "m.onnx");
  EXPECT_EQ(node_types(cut), (std::vector<std::string>{"Transpose", "MatMul"}));
  EXPECT_EQ(input_names(cut), std::vector<std::string>{"x"});
  ASSERT_EQ(cut.graph().output_size(), 1);
  EXPECT_EQ(cut.graph().output(0).name(), "logits");
  // Typed by shape inference: [batch, 3] float.
  const auto& type = cut.graph().output(0).type().tensor_type();
  EXPECT_EQ(type.elem_type(), onnx::TensorProto::FLOAT);
  ASSERT_EQ(type.shape().dim_size(), 2);
  EXPECT_EQ(type.shape().dim(1).dim_value(), 3);
  EXPECT_EQ(cut.graph().node(1).output(0), "logits");
  ASSERT_EQ(cut.graph().initializer_size(), 1);  // "shape" fed only the loss
  EXPECT_EQ(cut.graph().initializer(0).name(), "w");
}

TEST(InferenceModel, OutputPicksTheValue) {
  const onnx::ModelProto cut = inference_model(tied_head_model().model(), {"w"}, "flat", "m.onnx");
  EXPECT_EQ(node_types(cut), (std::vector<std::string>{"Transpose", "MatMul", "Reshape"}));
  EXPECT_EQ(cut.graph().output(0).name(), "flat");
  EXPECT_THROW(inference_model(tied_head_model().model(), {"w"}, "nowhere", "m.onnx"), Error);
}

TEST(InferenceModel, TwoParameterDependentLossInputsAreRefusedNamingThem) {
  testing::OnnxBuilder builder;
  builder.input("x", {-1, 2}).input("y", {-1, 2}).output("loss", {});
  builder.initializer("a", {2, 2}, {1, 0, 0, 1}).initializer("b", {2, 2}, {0, 1, 1, 0});
  builder.node("MatMul", {"x", "a"}, {"p"});
  builder.node("MatMul", {"x", "b"}, {"q"});
  builder.node("Sub", {"p", "y"}, {"dp"}, "first_error");
  builder.node("Sub", {"q", "y"}, {"dq"}, "second_error");
  builder.node("Add", {"dp", "dq"}, {"s"});
  testing::OnnxBuilder::attr(builder.node("ReduceMean", {"s"}, {"loss"}), "keepdims", int64_t{0});
  try {
    inference_model(builder.model(), {"a", "b"}, "", "m.onnx");
    FAIL() << "two loss inputs were accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("m.onnx, loss 'loss': the loss subgraph takes 2 values that depend on "
                        "parameters: 'p' (into node 'first_error'), 'q' (into node "
                        "'second_error'); pass --output NAME"),
              std::string::npos)
        << error.what();
  }
}

TEST(InferenceModel, NoLabelsIsRefused) {
  testing::OnnxBuilder builder;
  builder.input("x", {-1, 2}).output("loss", {});
  builder.initializer("a", {2, 2}, {1, 0, 0, 1});
  builder.node("MatMul", {"x", "a"}, {"p"});
  testing::OnnxBuilder::attr(builder.node("ReduceMean", {"p"}, {"loss"}), "keepdims", int64_t{0});
  try {
    inference_model(builder.model(), {"a"}, "", "m.onnx");
    FAIL() << "a loss without labels was cut";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no model input feeds only the loss"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace piper::formats
