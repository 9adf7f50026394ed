// piper-plan --list: the node and initializer names a strategy's globs match.
#include "planner/import/model_listing.h"

#include <gmock/gmock.h>

#include "onnx_builder.h"

namespace piper::planner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ModelListing, ListsNodesInitializersAndWhatPlanningFolds) {
  testing::OnnxBuilder b;
  b.input("x", {-1, 3, 4}).output("loss", {});
  b.node("Shape", {"x"}, {"shape"}, "/Shape");
  b.int_initializer("keep", {1}, {0});
  b.node("Gather", {"shape", "keep"}, {"batch"}, "/Gather");
  b.int_initializer("minus_one", {1}, {-1});
  testing::OnnxBuilder::attr(b.node("Concat", {"batch", "minus_one"}, {"target"}, "/Concat"),
                             "axis", int64_t{0});
  b.node("Reshape", {"x", "target"}, {"flat"}, "/Reshape");
  b.initializer("proj.weight", {12, 1}, std::vector<float>(12, 0.5f));
  b.node("MatMul", {"flat", "proj.weight"}, {"y"});
  b.node("ReduceSum", {"y"}, {"loss"}, "/loss");
  const std::string listing = list_model(b.model(), "m.onnx");
  EXPECT_THAT(listing, HasSubstr("m.onnx: 6 nodes (what \"annotations\" match), 3 initializers"));
  EXPECT_THAT(listing, HasSubstr("\n  /Shape     Shape  (folded into a constant when planned)\n"));
  EXPECT_THAT(listing, HasSubstr("\n  /Reshape   Reshape\n"));
  EXPECT_THAT(listing, ::testing::ContainsRegex("\n  /MatMul_[0-9]+ +MatMul\n"));
  EXPECT_THAT(listing, HasSubstr("\n  proj.weight  [12, 1]  float32\n"));
  EXPECT_THAT(listing, HasSubstr("\n  minus_one    [1]      int64\n"));
  EXPECT_THAT(listing, Not(HasSubstr("planning this model fails")));
}

TEST(ModelListing, ImportsAFixedBatchAsTheModelFixesIt) {
  testing::OnnxBuilder b;
  b.input("x", {8, 2}).output("loss", {});
  b.initializer("w", {2}, {1, 1});
  b.node("Mul", {"x", "w"}, {"y"}, "/Mul");
  b.node("ReduceSum", {"y"}, {"loss"}, "/loss");
  EXPECT_THAT(list_model(b.model(), "m.onnx"), Not(HasSubstr("planning this model fails")));
}

TEST(ModelListing, ListsAModelThatCannotBePlannedAndSaysWhy) {
  testing::OnnxBuilder b;
  b.input("x", {-1, 2}).output("y", {-1, 2});
  b.node("Relu", {"x"}, {"y"}, "/Relu");
  const std::string listing = list_model(b.model(), "m.onnx");
  EXPECT_THAT(listing, HasSubstr("\n  /Relu  Relu\n"));
  EXPECT_THAT(listing, HasSubstr("(planning this model fails: m.onnx: the model has no scalar"));
}

}  // namespace
}  // namespace piper::planner
