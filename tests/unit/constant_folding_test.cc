#include "planner/import/constant_folding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "formats/error.h"
#include "onnx_builder.h"
#include "planner/import/fold_rules.h"
#include "planner/import/import.h"

namespace piper::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::OnnxBuilder;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

ConstantValue ints(std::vector<int64_t> shape, std::vector<int64_t> values,
                   int32_t type = onnx::TensorProto::INT64) {
  ConstantValue value;
  value.data_type = type;
  value.shape = std::move(shape);
  value.ints = std::move(values);
  return value;
}

ConstantValue bools(std::vector<int64_t> shape, std::vector<int64_t> values) {
  return ints(std::move(shape), std::move(values), onnx::TensorProto::BOOL);
}

ConstantValue floats(std::vector<int64_t> shape, std::vector<float> values) {
  ConstantValue value;
  value.shape = std::move(shape);
  value.reals.assign(values.begin(), values.end());
  return value;
}

onnx::NodeProto make_node(const std::string& op, const std::string& name = "n") {
  onnx::NodeProto node;
  node.set_op_type(op);
  node.set_name(name);
  return node;
}

// Folds `node` over `inputs`, which must give a value.
ConstantValue fold(const onnx::NodeProto& node, const std::vector<ConstantValue>& inputs) {
  std::vector<const ConstantValue*> pointers;
  for (const auto& value : inputs) pointers.push_back(&value);
  const auto folded = fold_node(node, pointers);
  if (!folded) throw std::runtime_error(node.op_type() + " did not fold");
  return *folded;
}

// The message fold() throws, or "" when it folds.
std::string fold_error(const onnx::NodeProto& node, const std::vector<ConstantValue>& inputs) {
  try {
    fold(node, inputs);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

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

// ---- exact integers and float32 arithmetic

TEST(FoldRules, Int64StaysExact) {
  const auto sum = fold(make_node("Add"), {ints({1}, {kInt64Max - 1}), ints({1}, {1})});
  EXPECT_THAT(sum.ints, ElementsAre(kInt64Max));
  const auto product =
      fold(make_node("Mul"), {ints({1}, {(int64_t{1} << 53) + 1}), ints({1}, {3})});
  EXPECT_THAT(product.ints, ElementsAre(3 * ((int64_t{1} << 53) + 1)));
  // Integer Div truncates toward zero (ONNX's kernels, C++), unlike numpy's floor_divide.
  const auto quotient = fold(make_node("Div"), {ints({2}, {-7, 7}), ints({2}, {2, 2})});
  EXPECT_THAT(quotient.ints, ElementsAre(-3, 3));
  EXPECT_THAT(fold_error(make_node("Div", "/div"), {ints({1}, {1}), ints({1}, {0})}),
              HasSubstr("node '/div' (Div): divides an integer by zero"));
}

TEST(FoldRules, Float32ArithmeticRoundsAsFloat32) {
  // 2^24 + 1 is not a float32: float32 addition gives 2^24, double addition 2^24 + 1.
  const auto sum = fold(make_node("Add"), {floats({1}, {16777216.0f}), floats({1}, {1.0f})});
  EXPECT_THAT(sum.reals, ElementsAre(16777216.0));
  const auto quotient = fold(make_node("Div"), {floats({1}, {1.0f}), floats({1}, {3.0f})});
  EXPECT_EQ(quotient.reals[0], static_cast<double>(1.0f / 3.0f));
  EXPECT_NE(quotient.reals[0], 1.0 / 3.0);
  const auto product = fold(make_node("Mul"), {floats({1}, {0.1f}), floats({1}, {0.1f})});
  EXPECT_EQ(product.reals[0], static_cast<double>(0.1f * 0.1f));
}

TEST(FoldRules, LogIsFloat32) {
  const auto log = fold(make_node("Log"), {floats({3}, {1.0f, 2.0f, 0.1f})});
  EXPECT_THAT(log.reals, ElementsAre(0.0, static_cast<double>(std::log(2.0f)),
                                     static_cast<double>(std::log(0.1f))));
  EXPECT_THAT(fold_error(make_node("Log"), {ints({1}, {2})}), HasSubstr("integers"));
}

TEST(FoldRules, AbsAndNeg) {
  EXPECT_THAT(fold(make_node("Abs"), {ints({4}, {-3, 0, 4, kInt64Min + 1})}).ints,
              ElementsAre(3, 0, 4, kInt64Max));
  EXPECT_THAT(fold(make_node("Abs"), {floats({2}, {-1.5f, 2.0f})}).reals, ElementsAre(1.5, 2.0));
  EXPECT_THAT(fold(make_node("Neg"), {ints({2}, {kInt64Max, -2})}).ints,
              ElementsAre(-kInt64Max, 2));
}

TEST(FoldRules, MinAndMaxTakeAnyNumberOfBroadcastInputs) {
  const auto a = ints({3}, {1, 5, 3}), b = ints({2, 1}, {2, 4}), c = ints({}, {3});
  const auto min = fold(make_node("Min"), {a, b});
  EXPECT_EQ(min.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(min.ints, ElementsAre(1, 2, 2, 1, 4, 3));
  EXPECT_THAT(fold(make_node("Max"), {a, b, c}).ints, ElementsAre(3, 5, 3, 4, 5, 4));
  EXPECT_THAT(fold(make_node("Min"), {a}).ints, ElementsAre(1, 5, 3));
  const auto nan = std::numeric_limits<float>::quiet_NaN();
  const auto with_nan =
      fold(make_node("Max"), {floats({2}, {nan, 1.0f}), floats({2}, {0.0f, nan})});
  EXPECT_TRUE(std::isnan(with_nan.reals[0]) && std::isnan(with_nan.reals[1]));
}

TEST(FoldRules, ModFollowsTheDivisorUnlessFmod) {
  // numpy.mod and numpy.fmod of ONNX's mod_mixed_sign cases.
  const auto x = ints({6}, {-4, 7, 5, 4, -7, 8}), y = ints({6}, {2, -3, 8, -2, 3, 5});
  EXPECT_THAT(fold(make_node("Mod"), {x, y}).ints, ElementsAre(0, -2, 5, 0, 2, 3));
  auto fmod = make_node("Mod");
  OnnxBuilder::attr(fmod, "fmod", int64_t{1});
  EXPECT_THAT(fold(fmod, {x, y}).ints, ElementsAre(0, 1, 5, 0, -1, 3));
  const auto real = fold(fmod, {floats({2}, {-4.3f, 7.5f}), floats({2}, {2.1f, -2.0f})});
  EXPECT_THAT(real.reals, ElementsAre(static_cast<double>(std::fmod(-4.3f, 2.1f)), 1.5));
  EXPECT_THAT(fold_error(make_node("Mod"), {floats({1}, {1.0f}), floats({1}, {2.0f})}),
              HasSubstr("fmod=0"));
  EXPECT_THAT(fold(make_node("Mod"), {ints({1}, {kInt64Min}), ints({1}, {-1})}).ints,
              ElementsAre(0));
}

TEST(FoldRules, Comparisons) {
  const auto a = ints({3}, {1, 2, 3}), b = ints({}, {2});
  EXPECT_THAT(fold(make_node("LessOrEqual"), {a, b}).ints, ElementsAre(1, 1, 0));
  EXPECT_THAT(fold(make_node("GreaterOrEqual"), {a, b}).ints, ElementsAre(0, 1, 1));
  EXPECT_THAT(fold(make_node("Less"), {a, b}).ints, ElementsAre(1, 0, 0));
  EXPECT_THAT(fold(make_node("Greater"), {a, b}).ints, ElementsAre(0, 0, 1));
  EXPECT_THAT(fold(make_node("Equal"), {a, b}).ints, ElementsAre(0, 1, 0));
  EXPECT_EQ(fold(make_node("Equal"), {a, b}).data_type, onnx::TensorProto::BOOL);
  EXPECT_THAT(fold_error(make_node("Less"), {a, floats({1}, {1.0f})}),
              HasSubstr("different types"));
}

TEST(FoldRules, LogicalOps) {
  const auto a = bools({4}, {0, 0, 1, 1}), b = bools({4}, {0, 1, 0, 1});
  EXPECT_THAT(fold(make_node("And"), {a, b}).ints, ElementsAre(0, 0, 0, 1));
  EXPECT_THAT(fold(make_node("Or"), {a, b}).ints, ElementsAre(0, 1, 1, 1));
  EXPECT_THAT(fold(make_node("Xor"), {a, b}).ints, ElementsAre(0, 1, 1, 0));
  EXPECT_THAT(fold(make_node("Not"), {a}).ints, ElementsAre(1, 1, 0, 0));
  EXPECT_THAT(fold(make_node("And"), {bools({2, 1}, {0, 1}), bools({2}, {1, 1})}).ints,
              ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(fold_error(make_node("Not"), {ints({1}, {1})}), HasSubstr("(Not)"));
}

TEST(FoldRules, WhereSelectsWithBroadcasting) {
  const auto out = fold(make_node("Where"), {bools({2, 2}, {1, 0, 0, 1}), floats({2}, {1.0f, 2.0f}),
                                             floats({}, {-1.0f})});
  EXPECT_EQ(out.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(out.reals, ElementsAre(1.0, -1.0, -1.0, 2.0));
  EXPECT_THAT(fold(make_node("Where"),
                   {bools({2}, {0, 1}), ints({2}, {kInt64Max, 1}), ints({2}, {kInt64Min, 2})})
                  .ints,
              ElementsAre(kInt64Min, 1));
}

TEST(FoldRules, CastConvertsExactlyAndTruncates) {
  auto to = [](int64_t type) {
    auto node = make_node("Cast");
    OnnxBuilder::attr(node, "to", type);
    return node;
  };
  // int64 -> float32 rounds once: 2^24 + 1 becomes 2^24.
  EXPECT_THAT(fold(to(onnx::TensorProto::FLOAT), {ints({1}, {16777217})}).reals,
              ElementsAre(16777216.0));
  EXPECT_THAT(fold(to(onnx::TensorProto::INT64), {floats({3}, {2.7f, -2.7f, 1e10f})}).ints,
              ElementsAre(2, -2, 10000000000));
  EXPECT_THAT(fold(to(onnx::TensorProto::BOOL), {floats({3}, {0.0f, -0.5f, 3.0f})}).ints,
              ElementsAre(0, 1, 1));
  EXPECT_THAT(fold(to(onnx::TensorProto::INT64), {bools({2}, {1, 0})}).ints, ElementsAre(1, 0));
  EXPECT_THAT(fold(to(onnx::TensorProto::INT32), {ints({1}, {(int64_t{1} << 32) + 5})}).ints,
              ElementsAre(5));
  // NaN and values out of range give the most negative value, as x86, numpy and the engine.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THAT(fold(to(onnx::TensorProto::INT64),
                   {floats({3}, {-inf, inf, std::numeric_limits<float>::quiet_NaN()})})
                  .ints,
              ElementsAre(kInt64Min, kInt64Min, kInt64Min));
  EXPECT_THAT(fold(to(onnx::TensorProto::INT32), {floats({2}, {3e9f, -7.5f})}).ints,
              ElementsAre(std::numeric_limits<int32_t>::min(), -7));
  std::vector<const ConstantValue*> none;
  const auto half = ints({1}, {1});
  none.push_back(&half);
  EXPECT_FALSE(fold_node(to(onnx::TensorProto::FLOAT16), none));
}

TEST(FoldRules, RangeIsExactForIntegersAndFloat32ForFloats) {
  EXPECT_THAT(fold(make_node("Range"), {ints({}, {10}), ints({}, {1}), ints({}, {-3})}).ints,
              ElementsAre(10, 7, 4));
  EXPECT_THAT(fold(make_node("Range"),
                   {ints({}, {kInt64Min}), ints({}, {kInt64Max}), ints({}, {int64_t{1} << 62})})
                  .ints,
              ElementsAre(kInt64Min, kInt64Min + (int64_t{1} << 62), 0, int64_t{1} << 62));
  const auto real =
      fold(make_node("Range"), {floats({}, {0.0f}), floats({}, {1.0f}), floats({}, {0.3f})});
  EXPECT_THAT(real.reals,
              ElementsAre(0.0, static_cast<double>(0.3f), static_cast<double>(2.0f * 0.3f),
                          static_cast<double>(3.0f * 0.3f)));
  EXPECT_THAT(fold(make_node("Range"), {ints({}, {3}), ints({}, {1}), ints({}, {1})}).shape,
              ElementsAre(0));
  EXPECT_THAT(fold_error(make_node("Range"), {ints({0}, {}), ints({}, {1}), ints({}, {1})}),
              HasSubstr("must be scalars"));
}

// ---- layout

TEST(FoldRules, SliceClampsOpenEndsAsOnnxSays) {
  const auto data = ints({5}, {0, 1, 2, 3, 4});
  auto slice = [&](int64_t start, int64_t end, int64_t step) {
    return fold(make_node("Slice"),
                {data, ints({1}, {start}), ints({1}, {end}), ints({1}, {0}), ints({1}, {step})})
        .ints;
  };
  EXPECT_THAT(slice(1, kInt64Max, 1), ElementsAre(1, 2, 3, 4));              // x[1:]
  EXPECT_THAT(slice(-2, kInt64Max, 1), ElementsAre(3, 4));                   // x[-2:]
  EXPECT_THAT(slice(kInt64Max, kInt64Min, -1), ElementsAre(4, 3, 2, 1, 0));  // x[::-1]
  EXPECT_THAT(slice(-1, -1000, -2), ElementsAre(4, 2, 0));
  EXPECT_THAT(slice(0, kInt64Max, kInt64Max), ElementsAre(0));
  EXPECT_THAT(slice(kInt64Max, kInt64Min, kInt64Min), ElementsAre(4));
  EXPECT_THAT(slice(kInt64Min, 2, 1), ElementsAre(0, 1));
  EXPECT_TRUE(slice(3, 1, 1).empty());
  const auto matrix = fold(make_node("Slice"), {ints({2, 3}, {0, 1, 2, 3, 4, 5}), ints({1}, {1}),
                                                ints({1}, {kInt64Max}), ints({1}, {-1})});
  EXPECT_EQ(matrix.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(matrix.ints, ElementsAre(1, 2, 4, 5));
  EXPECT_THAT(fold_error(make_node("Slice"),
                         {data, ints({1}, {0}), ints({1}, {1}), ints({1}, {0}), ints({1}, {0})}),
              HasSubstr("steps must not be 0"));
}

TEST(FoldRules, ExpandBroadcastsBothWays) {
  const auto data = ints({2, 1}, {1, 2});
  const auto out = fold(make_node("Expand"), {data, ints({2}, {2, 3})});
  EXPECT_EQ(out.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(out.ints, ElementsAre(1, 1, 1, 2, 2, 2));
  // A target shape smaller than the data's keeps the data's (ONNX: bidirectional).
  EXPECT_EQ(fold(make_node("Expand"), {data, ints({1}, {1})}).shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(fold(make_node("Expand"), {data, ints({3}, {2, 1, 4})}).shape,
            (std::vector<int64_t>{2, 2, 4}));
  EXPECT_THAT(fold_error(make_node("Expand", "/expand"), {data, ints({2}, {3, 1})}),
              HasSubstr("node '/expand' (Expand): shapes [2, 1] and [3, 1] do not broadcast"));
}

TEST(FoldRules, TileRepeatsEachAxis) {
  const auto data = ints({2, 2}, {1, 2, 3, 4});
  const auto wide = fold(make_node("Tile"), {data, ints({2}, {1, 2})});
  EXPECT_EQ(wide.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_THAT(wide.ints, ElementsAre(1, 2, 1, 2, 3, 4, 3, 4));
  EXPECT_THAT(fold(make_node("Tile"), {data, ints({2}, {2, 1})}).ints,
              ElementsAre(1, 2, 3, 4, 1, 2, 3, 4));
  EXPECT_THAT(fold(make_node("Tile"), {data, ints({2}, {0, 1})}).shape, ElementsAre(0, 2));
  EXPECT_THAT(fold_error(make_node("Tile"), {data, ints({1}, {2})}),
              HasSubstr("one entry per dimension"));
}

TEST(FoldRules, TransposePermutes) {
  const auto data = ints({2, 3}, {0, 1, 2, 3, 4, 5});
  const auto reversed = fold(make_node("Transpose"), {data});
  EXPECT_EQ(reversed.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_THAT(reversed.ints, ElementsAre(0, 3, 1, 4, 2, 5));
  auto node = make_node("Transpose");
  OnnxBuilder::attr(node, "perm", std::vector<int64_t>{1, 0, 2});
  const auto cube = fold(node, {ints({2, 2, 1}, {0, 1, 2, 3})});
  EXPECT_THAT(cube.ints, ElementsAre(0, 2, 1, 3));
  auto bad = make_node("Transpose");
  OnnxBuilder::attr(bad, "perm", std::vector<int64_t>{0, 0});
  EXPECT_THAT(fold_error(bad, {data}), HasSubstr("not a permutation"));
}

TEST(FoldRules, GatherConcatAndReshape) {
  auto gather = make_node("Gather");
  OnnxBuilder::attr(gather, "axis", int64_t{1});
  const auto picked = fold(gather, {ints({2, 3}, {0, 1, 2, 3, 4, 5}), ints({2}, {-1, 0})});
  EXPECT_EQ(picked.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(picked.ints, ElementsAre(2, 0, 5, 3));
  auto concat = make_node("Concat");
  OnnxBuilder::attr(concat, "axis", int64_t{-1});
  const auto joined = fold(concat, {ints({2, 1}, {1, 2}), ints({2, 2}, {3, 4, 5, 6})});
  EXPECT_THAT(joined.ints, ElementsAre(1, 3, 4, 2, 5, 6));
  const auto reshaped = fold(make_node("Reshape"), {joined, ints({2}, {0, -1})});
  EXPECT_EQ(reshaped.shape, (std::vector<int64_t>{2, 3}));
}

// ---- malformed nodes are errors naming the node, never crashes

TEST(FoldRules, MalformedNodesNameTheNode) {
  auto concat = make_node("Concat", "/cat");
  OnnxBuilder::attr(concat, "axis", int64_t{5});
  EXPECT_THAT(fold_error(concat, {ints({1, 2}, {1, 2}), ints({1, 2}, {3, 4})}),
              HasSubstr("node '/cat' (Concat): axis 5 is out of range for rank 2"));
  auto ragged = make_node("Concat", "/ragged");
  EXPECT_THAT(fold_error(ragged, {ints({1, 2}, {1, 2}), ints({1, 3}, {3, 4, 5})}),
              HasSubstr("node '/ragged' (Concat): input 1 [1, 3] does not match input 0"));
  EXPECT_THAT(fold_error(make_node("Gather", "/take"), {ints({3}, {1, 2, 3}), ints({1}, {3})}),
              HasSubstr("node '/take' (Gather): index 3 is out of range for axis 0 of size 3"));
  EXPECT_THAT(fold_error(make_node("Reshape", "/view"),
                         {ints({2, 3}, {0, 1, 2, 3, 4, 5}), ints({2}, {4, -1})}),
              HasSubstr("node '/view' (Reshape): cannot reshape [2, 3] to [4, -1]"));
  EXPECT_THAT(
      fold_error(make_node("Reshape"), {ints({2, 3}, {0, 1, 2, 3, 4, 5}), ints({2}, {4, 2})}),
      HasSubstr("cannot reshape [2, 3] (6 elements) to [4, 2]"));
  // A dimension of 2^62 overflows the element count.
  EXPECT_THAT(fold_error(make_node("ConstantOfShape", "/fill"), {ints({2}, {int64_t{1} << 62, 4})}),
              HasSubstr("node '/fill' (ConstantOfShape): shape [4611686018427387904, 4] has "
                        "more elements than int64 counts"));
  // Too large to keep in the plan but countable: left to the engine.
  std::vector<const ConstantValue*> huge_shape;
  const auto big = ints({1}, {int64_t{1} << 40});
  huge_shape.push_back(&big);
  EXPECT_FALSE(fold_node(make_node("ConstantOfShape"), huge_shape));
  EXPECT_THAT(fold_error(make_node("Unsqueeze", "/u"), {ints({2}, {1, 2}), ints({1}, {3})}),
              HasSubstr("node '/u' (Unsqueeze): axis 3 is out of range for rank 2"));
  EXPECT_THAT(fold_error(make_node("Add", "/add"), {ints({2}, {1, 2})}),
              HasSubstr("node '/add' (Add): input 1 is missing"));
}

TEST(FoldRules, EmptyTensorsFoldToEmptyTensors) {
  const auto sum = fold(make_node("Add"), {ints({0}, {}), ints({1}, {1})});
  EXPECT_THAT(sum.shape, ElementsAre(0));
  EXPECT_TRUE(sum.ints.empty());
  EXPECT_THAT(fold_error(make_node("Add"), {ints({0}, {}), ints({3}, {1, 2, 3})}),
              HasSubstr("do not broadcast"));
  auto concat = make_node("Concat");
  EXPECT_THAT(fold(concat, {ints({0}, {}), ints({2}, {1, 2})}).ints, ElementsAre(1, 2));
  EXPECT_THAT(fold_error(make_node("Gather"), {ints({0}, {}), ints({1}, {0})}),
              HasSubstr("out of range for axis 0 of size 0"));
  EXPECT_THAT(fold(make_node("Slice"), {ints({0}, {}), ints({1}, {kInt64Max}),
                                        ints({1}, {kInt64Min}), ints({1}, {0}), ints({1}, {-1})})
                  .shape,
              ElementsAre(0));
}

// ---- through import

// Two nodes as PyTorch writes x[:, 1:]: a Slice whose end is INT64_MAX, then the loss.
OnnxBuilder open_slice_model() {
  OnnxBuilder b;
  b.input("x", {-1, 4}).output("loss", {});
  b.int_initializer("starts", {1}, {1});
  b.int_initializer("ends", {1}, {kInt64Max});
  b.int_initializer("axes", {1}, {1});
  b.node("Slice", {"x", "starts", "ends", "axes"}, {"tail"}, "/Slice");
  b.node("ReduceSum", {"tail"}, {"loss"});
  return b;
}

TEST(ConstantFolding, OpenEndedSlicePlansWithItsEndExact) {
  const ir::OpGraph graph = import_model(open_slice_model().model(), {.batch = 2}, "m.onnx");
  const ir::Op& slice = graph.op(0);
  ASSERT_EQ(slice.type, "Slice");
  EXPECT_EQ(graph.tensor(slice.outputs[0]).shape, (ir::Shape{2, 3}));
  int64_t end = 0;
  const ir::Tensor& ends = graph.tensor(slice.inputs[2]);
  ASSERT_EQ(ends.data.size(), sizeof(end));
  std::memcpy(&end, ends.data.data(), sizeof(end));
  EXPECT_EQ(end, kInt64Max);
}

// Reads a folded int64 constant of `graph` by name.
std::vector<int64_t> folded_ints(const ir::OpGraph& graph, const std::string& name) {
  const ir::Tensor& tensor = graph.tensor(*graph.find_tensor(name));
  EXPECT_EQ(tensor.role, ir::Role::kConstant);
  std::vector<int64_t> values(tensor.data.size() / sizeof(int64_t));
  std::memcpy(values.data(), tensor.data.data(), tensor.data.size());
  return values;
}

TEST(ConstantFolding, ConstantSliceWithOpenEndFoldsToTheRightValues) {
  // shape(x)[1:] with x of [batch, 3, 4]: PyTorch's x.shape[1:].
  OnnxBuilder b;
  b.input("x", {-1, 3, 4}).output("loss", {});
  b.node("Shape", {"x"}, {"shape"});
  b.int_initializer("starts", {1}, {1});
  b.int_initializer("ends", {1}, {kInt64Max});
  b.node("Slice", {"shape", "starts", "ends"}, {"dims"});
  b.int_initializer("batch", {1}, {-1});
  b.node("Concat", {"batch", "dims"}, {"target"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto axis;
    axis.set_name("axis");
    axis.set_type(onnx::AttributeProto::INT);
    axis.set_i(0);
    return axis;
  }());
  b.node("Reshape", {"x", "target"}, {"same"});
  b.node("ReduceSum", {"same"}, {"loss"});
  const ir::OpGraph graph = import_model(b.model(), {.batch = 2}, "m.onnx");
  EXPECT_THAT(folded_ints(graph, "target"), ElementsAre(-1, 3, 4));
}

// Split of a constant, as exporters write repeat_interleave's sizes (HF CodeGen): [2, 3, 4]
// split into [2] and [3, 4], the second half the target of a Reshape. `sizes` is the split
// input ({} for equal parts).
OnnxBuilder split_model(const std::vector<int64_t>& sizes) {
  OnnxBuilder b;
  b.input("x", {-1, 12}).output("loss", {});
  b.int_initializer("dims", {3}, {2, 3, 4});
  std::vector<std::string> inputs = {"dims"};
  if (!sizes.empty()) {
    b.int_initializer("sizes", {static_cast<int64_t>(sizes.size())}, sizes);
    inputs.push_back("sizes");
  }
  b.node("Split", inputs, {"head", "tail"}, "/split/Split");
  b.int_initializer("batch", {1}, {-1});
  OnnxBuilder::attr(b.node("Concat", {"batch", "tail"}, {"target"}), "axis", int64_t{0});
  b.node("Reshape", {"x", "target"}, {"y"});
  b.node("ReduceSum", {"y"}, {"loss"});
  return b;
}

TEST(ConstantFolding, SplitOfAConstantFoldsEveryPart) {
  const ir::OpGraph graph = import_model(split_model({1, 2}).model(), {.batch = 2}, "m.onnx");
  EXPECT_THAT(folded_ints(graph, "target"), ElementsAre(-1, 3, 4));
  for (const ir::Op& op : graph.ops()) EXPECT_NE(op.type, "Split");
}

TEST(ConstantFolding, SplitThatDoesNotAddUpNamesTheNode) {
  try {
    import_model(split_model({1, 1}).model(), {.batch = 2}, "m.onnx");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("/split/Split"));
  }
}

// fold::fold_split itself: equal parts without sizes, and the check shape inference may leave
// to it.
TEST(FoldRules, SplitGivesEachPart) {
  onnx::NodeProto split = make_node("Split");
  split.add_output("a");
  split.add_output("b");
  const ConstantValue four = ints({4}, {1, 2, 3, 4}), sizes = ints({2}, {1, 1});
  const std::vector<ConstantValue> halves = fold::fold_split(split, {&four, nullptr});
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_THAT(halves[0].ints, ElementsAre(1, 2));
  EXPECT_THAT(halves[1].ints, ElementsAre(3, 4));
  try {
    fold::fold_split(split, {&four, &sizes});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("add up to axis 0's 4"));
  }
}

// A Concat of two constants whose axis is out of range, feeding a Reshape.
OnnxBuilder bad_concat_model() {
  OnnxBuilder b;
  b.input("x", {-1, 4}).output("loss", {});
  b.int_initializer("a", {1}, {-1});
  b.int_initializer("c", {1}, {2});
  OnnxBuilder::attr(b.node("Concat", {"a", "c"}, {"target"}, "/bad/Concat"), "axis", int64_t{5});
  b.node("Reshape", {"x", "target"}, {"y"});
  b.node("ReduceSum", {"y"}, {"loss"});
  return b;
}

TEST(ConstantFolding, MalformedModelIsAnErrorNamingTheNode) {
  try {
    import_model(bad_concat_model().model(), {.batch = 2}, "m.onnx");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("m.onnx"));
    EXPECT_THAT(error.what(), HasSubstr("/bad/Concat")) << error.what();
    std::cerr << error.what() << "\n";
  }
}

}  // namespace
}  // namespace piper::planner
