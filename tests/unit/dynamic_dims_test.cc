// ir::infer_dynamic_dims: run-time extents from NonZero's count through the ops of a dropless
// expert dispatch (HF Mixtral's `torch.where(mask)`, gather, expert MLP, scatter back), and
// the ops that cannot carry one.
#include "planner/ir/dynamic_dims.h"

#include <gtest/gtest.h>

#include "formats/error.h"
#include "planner/ir/text.h"
#include "planner/ir/verify.h"

namespace piper::ir {
namespace {

// mask[2,6]: which of 6 tokens picked this expert as choice 0 or 1. The count of picks is at
// most 12, the bound of every dispatched dimension.
const std::string kDispatch = R"(
tensor mask bool[2,6] input
tensor x f32[6,4] input
tensor w f32[4,3] parameter
tensor axis i64[1] constant data=[1]
tensor count i64[] activation
tensor picks i64[2,12] activation
tensor picks_t i64[12,2] activation
tensor choice i64[12,1] activation
tensor token i64[12,1] activation
tensor token_flat i64[12] activation
tensor rows f32[12,4] activation
tensor y f32[12,3] activation
tensor y_flat f32[36] activation
tensor y_back f32[12,3] activation
tensor total f32[3] activation
tensor dy f32[12,3] activation
tensor dw f32[4,3] gradient
tensor dx f32[6,4] activation
op 0 NonZero "/nz" (mask) -> (picks, count)
op 1 Transpose "/t" (picks) -> (picks_t) {perm=[1,0]}
op 2 Split "/split" (picks_t) -> (choice, token) {axis=1}
op 3 Squeeze "/squeeze" (token, axis) -> (token_flat)
op 4 Gather "/gather" (x, token_flat) -> (rows) {axis=0}
op 5 MatMul "/expert" (rows, w) -> (y)
op 6 Reshape "/flat" (y) -> (y_flat)
op 7 Reshape "/unflat" (y_flat) -> (y_back)
op 8 ReduceSum "/total" (y_back) -> (total) {axes=[0], keepdims=0}
op 9 Mul "/dy" (y_back, y) -> (dy) pass=B
op 10 piper.MatMul "/dw" (rows, dy) -> (dw) {transA=1} pass=B
op 11 piper.GatherGrad "/dx" (dy, token_flat) -> (dx) {axis=0} pass=B
)";

TEST(DynamicDims, NonZeroCountSizesEveryDispatchedDimension) {
  TaskGraph graph = parse(kDispatch);
  OpGraph& ops = graph.op_graph();
  infer_dynamic_dims(ops);
  const auto shape = [&](const char* name) { return describe_shape(ops, *ops.find_tensor(name)); };
  EXPECT_EQ(shape("picks"), "[2, <=12 x count]");
  EXPECT_EQ(shape("picks_t"), "[<=12 x count, 2]");
  EXPECT_EQ(shape("token_flat"), "[<=12 x count]");
  EXPECT_EQ(shape("rows"), "[<=12 x count, 4]");
  EXPECT_EQ(shape("y"), "[<=12 x count, 3]");
  EXPECT_EQ(shape("y_flat"), "[<=36 x 3*count]");  // three elements per dispatched row
  EXPECT_EQ(shape("y_back"), "[<=12 x count, 3]");
  EXPECT_EQ(shape("dy"), "[<=12 x count, 3]");
  // Reductions over the dispatched rows, and scatters back, are static again.
  EXPECT_EQ(shape("total"), "[3]");
  EXPECT_EQ(shape("dw"), "[4, 3]");
  EXPECT_EQ(shape("dx"), "[6, 4]");
  EXPECT_TRUE(verify(graph).empty());
  // The text form carries the extents and reads back the same.
  const std::string text = print(graph);
  EXPECT_NE(text.find("tensor y f32[12,3] activation dynamic=[(0, count, 1)]"), std::string::npos)
      << text;
  EXPECT_EQ(print(parse(text)), text);
}

TEST(DynamicDims, ImportedUnknownDimensionsGetTheirBounds) {
  TaskGraph graph = parse(kDispatch);
  OpGraph& ops = graph.op_graph();
  // As imported, ONNX's shape inference leaves the count symbolic.
  for (const char* name : {"picks", "picks_t", "token_flat", "rows", "y_flat"}) {
    Shape& shape = ops.tensor(*ops.find_tensor(name)).shape;
    std::replace(shape.begin(), shape.end(), int64_t{12}, kUnknownDim);
    std::replace(shape.begin(), shape.end(), int64_t{36}, kUnknownDim);
  }
  infer_dynamic_dims(ops);
  EXPECT_EQ(ops.tensor(*ops.find_tensor("rows")).shape, (Shape{12, 4}));
  EXPECT_EQ(ops.tensor(*ops.find_tensor("y_flat")).shape, (Shape{36}));
}

void ExpectRefused(const std::string& extra, const std::string& node, const std::string& words) {
  TaskGraph graph = parse(kDispatch + extra);
  try {
    infer_dynamic_dims(graph.op_graph());
    FAIL() << "expected an error naming " << node;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(node), std::string::npos) << message;
    EXPECT_NE(message.find(words), std::string::npos) << message;
  }
}

TEST(DynamicDims, OpsThatWouldMixAnExtentWithStaticSizesAreRefused) {
  // Dispatched rows times 12 static rows: a static 12 is not the count.
  ExpectRefused(R"(tensor w_rows f32[12,3] parameter
tensor bad f32[12,3] activation
op 12 Mul "/bad" (y, w_rows) -> (bad)
)",
                "'/bad' (Mul)", "broadcasts only against itself or 1");
  // Slicing the dispatched rows to a fixed count.
  ExpectRefused(R"(tensor half f32[6,3] activation
op 12 Slice "/half" (y) -> (half)
)",
                "'/half' (Slice)", "known only at run time");
  // An op without a rule for extents.
  ExpectRefused(R"(tensor top f32[1,3] activation
op 12 TopK "/top" (y, axis) -> (top) {axis=0}
)",
                "'/top' (TopK)", "no rule");
}

}  // namespace
}  // namespace piper::ir
