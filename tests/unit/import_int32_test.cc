// Import computes a model's int32 values in int64 (planner/import/widen_int32.h): the position
// ids HF RoBERTa writes as Cast(to=INT32), CumSum, Mul, Cast(to=INT64), with int32 constants
// folded as int32 first.
#include <gmock/gmock.h>

#include <cstring>

#include "formats/error.h"
#include "onnx_builder.h"
#include "planner/import/import.h"

namespace piper::planner {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;

void add_int32_initializer(onnx::ModelProto& model, const std::string& name, int32_t value) {
  onnx::TensorProto* tensor = model.mutable_graph()->add_initializer();
  tensor->set_name(name);
  tensor->set_data_type(onnx::TensorProto::INT32);
  tensor->add_dims(1);
  tensor->add_int32_data(value);
}

// ids [B, 4] -> positions = CumSum(int32(ids != 0)) * int32(ids != 0) + 5 -> rows of a
// table -> loss. The 5 is int32(2^32 + 5), folded as int32 wraps it.
onnx::ModelProto position_model(int ids_type = onnx::TensorProto::INT64) {
  OnnxBuilder b;
  b.input("ids", {-1, 4}, ids_type).output("loss", {});
  b.int_initializer("zero", {1}, {0});
  b.int_initializer("big", {1}, {(int64_t{1} << 32) + 5});
  b.initializer("table", {16, 3}, std::vector<float>(48, 0.5f));
  b.node("Equal", {"ids", "zero"}, {"pad"});
  b.node("Not", {"pad"}, {"kept"});
  OnnxBuilder::attr(b.node("Cast", {"kept"}, {"mask"}), "to", int64_t{onnx::TensorProto::INT32});
  b.node("CumSum", {"mask", "axis"}, {"counts"});
  b.node("Mul", {"counts", "mask"}, {"masked"});
  OnnxBuilder::attr(b.node("Cast", {"masked"}, {"positions"}), "to",
                    int64_t{onnx::TensorProto::INT64});
  OnnxBuilder::attr(b.node("Cast", {"big"}, {"big32"}), "to", int64_t{onnx::TensorProto::INT32});
  OnnxBuilder::attr(b.node("Cast", {"big32"}, {"offset"}), "to", int64_t{onnx::TensorProto::INT64});
  b.node("Add", {"positions", "offset"}, {"rows"});
  b.node("Gather", {"table", "rows"}, {"embedded"});
  b.node("ReduceSum", {"embedded"}, {"loss"});
  onnx::ModelProto model = b.model();
  add_int32_initializer(model, "axis", 1);  // as PyTorch writes CumSum's axis
  return model;
}

const ir::Op& only_op(const ir::OpGraph& graph, const std::string& type) {
  const ir::Op* found = nullptr;
  for (const ir::Op& op : graph.ops()) {
    if (op.type != type) continue;
    EXPECT_EQ(found, nullptr) << "two " << type;
    found = &op;
  }
  EXPECT_NE(found, nullptr) << "no " << type;
  return *found;
}

TEST(ImportInt32, PositionIdsRunInInt64) {
  const ir::OpGraph graph = import_model(position_model(), {.batch = 2}, "m.onnx");
  for (const ir::Op& op : graph.ops()) {
    if (op.type == "Cast") {
      EXPECT_EQ(ir::attr_int(op.attributes, "to", 0), onnx::TensorProto::INT64) << op.name;
    }
  }
  const ir::Op& cumsum = only_op(graph, "CumSum");
  EXPECT_EQ(graph.tensor(cumsum.inputs.at(0)).dtype, ir::DType::kInt64);
  EXPECT_EQ(graph.tensor(cumsum.outputs.at(0)).dtype, ir::DType::kInt64);
  const ir::Tensor& axis = graph.tensor(cumsum.inputs.at(1));
  EXPECT_EQ(axis.dtype, ir::DType::kInt64);
  EXPECT_EQ(axis.role, ir::Role::kConstant);  // carried by the plan, not read from the file
  ASSERT_EQ(axis.data.size(), sizeof(int64_t));
  int64_t value = 0;
  std::memcpy(&value, axis.data.data(), sizeof(value));
  EXPECT_EQ(value, 1);
  EXPECT_EQ(graph.tensor(only_op(graph, "Mul").outputs.at(0)).dtype, ir::DType::kInt64);
}

TEST(ImportInt32, ConstantsFoldAsInt32) {
  const ir::OpGraph graph = import_model(position_model(), {.batch = 2}, "m.onnx");
  const ir::Tensor& offset = graph.tensor(only_op(graph, "Add").inputs.at(1));
  ASSERT_EQ(offset.role, ir::Role::kConstant);
  ASSERT_EQ(offset.data.size(), sizeof(int64_t));
  int64_t value = 0;
  std::memcpy(&value, offset.data.data(), sizeof(value));
  EXPECT_EQ(value, 5);  // 2^32 + 5 wrapped to int32 before the widening
}

TEST(ImportInt32, AnInt32InputIsRefusedNamingTheFix) {
  try {
    import_model(position_model(onnx::TensorProto::INT32), {.batch = 2}, "m.onnx");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("'ids' is INT32, which Piper does not support"));
    EXPECT_THAT(error.what(), HasSubstr("example inputs and data of int64"));
  }
}

}  // namespace
}  // namespace piper::planner
