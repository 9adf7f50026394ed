// Import drops the Cast to double that PyTorch puts before IsInf (torch.isinf), and only
// where IsInf and IsNaN are all that read it.
#include <gmock/gmock.h>

#include "formats/error.h"
#include "onnx_builder.h"
#include "planner/import/import.h"

namespace piper::planner {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;

// x -> Cast(to = DOUBLE) -> IsInf and IsNaN -> Cast(to = FLOAT) -> Add -> ReduceSum -> loss,
// as torch.onnx.export writes torch.isinf(x).float() + torch.isnan(x.double()).float();
// `also_added` makes an Add read the double too.
OnnxBuilder class_test_model(bool also_added) {
  OnnxBuilder b;
  b.input("x", {-1, 3}).output("loss", {});
  OnnxBuilder::attr(b.node("Cast", {"x"}, {"x_double"}), "to", int64_t{onnx::TensorProto::DOUBLE});
  b.node("IsInf", {"x_double"}, {"inf"});
  b.node("IsNaN", {"x_double"}, {"nan"});
  OnnxBuilder::attr(b.node("Cast", {"inf"}, {"inf_float"}), "to",
                    int64_t{onnx::TensorProto::FLOAT});
  OnnxBuilder::attr(b.node("Cast", {"nan"}, {"nan_float"}), "to",
                    int64_t{onnx::TensorProto::FLOAT});
  b.node("Add", {"inf_float", "nan_float"}, {"flags"});
  if (also_added) b.node("Add", {"x_double", "x_double"}, {"twice"});
  b.node("ReduceSum", {"flags"}, {"loss"});
  return b;
}

TEST(ImportDoubleCast, IsInfAndIsNaNReadTheFloatInput) {
  const ir::OpGraph graph = import_model(class_test_model(false).model(), {.batch = 2}, "m.onnx");
  int tests = 0;
  for (const ir::Op& op : graph.ops()) {
    EXPECT_FALSE(op.type == "Cast" && ir::attr_int(op.attributes, "to", 0) == 11) << op.name;
    if (op.type != "IsInf" && op.type != "IsNaN") continue;
    ++tests;
    EXPECT_EQ(graph.tensor(op.inputs.at(0)).name, "x") << op.type;
    EXPECT_EQ(graph.tensor(op.inputs.at(0)).dtype, ir::DType::kFloat32) << op.type;
  }
  EXPECT_EQ(tests, 2);
}

TEST(ImportDoubleCast, ADoubleOtherOpsReadStaysRefused) {
  try {
    import_model(class_test_model(true).model(), {.batch = 2}, "m.onnx");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("'x_double' is DOUBLE, which Piper does not support"));
  }
}

}  // namespace
}  // namespace piper::planner
