// The message for a model with op types Piper cannot train through: every type at once,
// with its count, first node and what to do.
#include "planner/autodiff/unsupported_ops.h"

#include <gmock/gmock.h>

#include "formats/error.h"
#include "onnx_builder.h"
#include "planner/autodiff/autodiff.h"
#include "planner/import/import.h"

namespace piper::planner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(UnsupportedOps, OneMessageListsEveryTypeWithCountFirstNodeAndAdvice) {
  testing::OnnxBuilder b;
  b.input("x", {-1, 2, 2}).output("loss", {});
  b.initializer("w", {2, 2}, {1, 2, 3, 4});
  b.node("Mul", {"x", "w"}, {"xw"});
  b.node("Det", {"xw"}, {"d1"}, "/det/a");
  b.node("Det", {"xw"}, {"d2"}, "/det/b");
  b.node("Bernoulli", {"d1"}, {"coin"}, "/coin");
  b.node("Add", {"d2", "coin"}, {"sum"});
  b.node("ReduceSum", {"sum"}, {"loss"});
  const ir::OpGraph graph = import_model(b.model(), {.batch = 2}, "m.onnx");
  try {
    check_supported_ops(graph, "m.onnx");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_THAT(message, HasSubstr("m.onnx: 2 op types are not supported by Piper:\n"));
    EXPECT_THAT(message, HasSubstr("\n  Det (2 nodes, first '/det/a'): not supported; rewrite"));
    EXPECT_THAT(message, HasSubstr("\n  Bernoulli (1 node, first '/coin'): random values"));
    EXPECT_THAT(message, HasSubstr("\nsupported op types: "));
    EXPECT_THAT(message, Not(HasSubstr("/det/b")));
  }
}

TEST(UnsupportedOps, AdviceSaysWhatTheUserCanDo) {
  EXPECT_THAT(unsupported_op_advice("ScatterND"), HasSubstr("not yet supported"));
  EXPECT_THAT(unsupported_op_advice("Loop"), HasSubstr("control flow"));
  EXPECT_THAT(unsupported_op_advice("SequenceConstruct"), HasSubstr("torch.stack"));
  EXPECT_THAT(unsupported_op_advice("QuantizeLinear"), HasSubstr("float model"));
  EXPECT_THAT(unsupported_op_advice("com.microsoft.FusedMatMul"),
              HasSubstr("OperatorExportTypes.ONNX"));
  EXPECT_THAT(unsupported_op_advice("Det"), HasSubstr("rewrite"));
}

}  // namespace
}  // namespace piper::planner
