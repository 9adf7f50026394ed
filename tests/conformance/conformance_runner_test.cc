// Tests of the conformance runner itself: comparison, the unsupported list, attribute
// conversion, and a multi-node model run node by node through the CPU backend.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/cpu/cpu_backend.h"
#include "formats/error.h"
#include "tests/conformance/compare.h"
#include "tests/conformance/node_runner.h"
#include "tests/conformance/test_case.h"
#include "tests/conformance/unsupported_list.h"
#include "tests/unit/onnx_builder.h"

namespace piper::conformance {
namespace {

HostTensor floats(engine::Shape shape, const std::vector<float>& values) {
  HostTensor t{plan::FLOAT32, std::move(shape), std::vector<uint8_t>(values.size() * 4)};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

HostTensor ints(engine::Shape shape, const std::vector<int64_t>& values) {
  HostTensor t{plan::INT64, std::move(shape), std::vector<uint8_t>(values.size() * 8)};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

TEST(ConformanceCompare, FloatsWithinToleranceMatch) {
  const Comparison c = compare(floats({2}, {1.0f, 100.0f}), floats({2}, {1.000005f, 100.005f}),
                               Tolerance{1e-4, 1e-5});
  EXPECT_TRUE(c.ok) << c.detail;
  EXPECT_GT(c.max_abs_diff, 0.0);
}

TEST(ConformanceCompare, ReportsTheLargestMismatch) {
  const Comparison c =
      compare(floats({3}, {1.0f, 2.5f, 3.1f}), floats({3}, {1.0f, 2.0f, 3.0f}), Tolerance{});
  EXPECT_FALSE(c.ok);
  EXPECT_NEAR(c.max_abs_diff, 0.5, 1e-6);
  EXPECT_NE(c.detail.find("2 of 3 elements differ"), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("at element 1"), std::string::npos) << c.detail;
}

TEST(ConformanceCompare, NanEqualsNanButNotANumber) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(compare(floats({2}, {nan, inf}), floats({2}, {nan, inf}), Tolerance{}).ok);
  EXPECT_FALSE(compare(floats({1}, {0.0f}), floats({1}, {nan}), Tolerance{}).ok);
  EXPECT_FALSE(compare(floats({1}, {inf}), floats({1}, {-inf}), Tolerance{}).ok);
}

TEST(ConformanceCompare, IntegersExactAndShapesChecked) {
  EXPECT_TRUE(compare(ints({2}, {3, -4}), ints({2}, {3, -4}), Tolerance{}).ok);
  EXPECT_FALSE(compare(ints({2}, {3, -4}), ints({2}, {3, -5}), Tolerance{1.0, 1.0}).ok);
  const Comparison c = compare(floats({2, 1}, {1, 2}), floats({1, 2}, {1, 2}), Tolerance{});
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.detail.find("[2, 1]"), std::string::npos) << c.detail;
}

TEST(ConformanceUnsupportedList, ParsesGlobsReasonsAndFindsUnusedEntries) {
  UnsupportedList list = UnsupportedList::parse(
      "# comment\n\ntest_max_int*   dtype int\n  test_exact \t  a reason  \n", "list.txt");
  ASSERT_EQ(list.entries().size(), 2u);
  EXPECT_EQ(list.entries()[1].reason, "a reason");
  ASSERT_NE(list.match("test_max_int32"), nullptr);
  EXPECT_EQ(list.match("test_max_int32")->line, 3);
  EXPECT_EQ(list.match("test_max_float"), nullptr);
  ASSERT_EQ(list.unused().size(), 1u);
  EXPECT_EQ(list.unused()[0]->pattern, "test_exact");
}

TEST(ConformanceUnsupportedList, AnEntryWithoutReasonNamesItsLine) {
  try {
    UnsupportedList::parse("test_a reason\ntest_b\n", "list.txt");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("list.txt:2"), std::string::npos) << error.what();
  }
}

TEST(ConformanceKernel, ConvertsAttributesAndOmittedTensors) {
  onnx::NodeProto node;
  node.set_op_type("ConstantOfShape");
  node.add_input("shape");
  node.add_input("");
  node.add_output("y");
  testing::OnnxBuilder::attr(node, "axis", int64_t{2});
  testing::OnnxBuilder::attr(node, "alpha", 0.5f);
  testing::OnnxBuilder::attr(node, "perm", std::vector<int64_t>{1, 0});
  auto* value = node.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::INT32);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_int32_data(7);
  EXPECT_EQ(node_problem(node), "");
  const plan::Kernel kernel = kernel_from_node(node);
  EXPECT_EQ(kernel.op_type(), "ConstantOfShape");
  ASSERT_EQ(kernel.attributes_size(), 4);
  EXPECT_EQ(kernel.attributes(0).i(), 2);
  EXPECT_DOUBLE_EQ(kernel.attributes(1).f(), 0.5);
  EXPECT_EQ(kernel.attributes(2).ints().values_size(), 2);
  EXPECT_EQ(kernel.attributes(3).value_case(), plan::Attribute::kI);
  EXPECT_EQ(kernel.attributes(3).i(), 7);
  ASSERT_EQ(kernel.inputs_size(), 2);
  EXPECT_EQ(kernel.inputs(1), -1);
}

TEST(ConformanceKernel, AGraphAttributeIsAProblem) {
  onnx::NodeProto node;
  node.set_op_type("If");
  auto* branch = node.add_attribute();
  branch->set_name("then_branch");
  branch->set_type(onnx::AttributeProto::GRAPH);
  EXPECT_NE(node_problem(node).find("GRAPH"), std::string::npos) << node_problem(node);
  EXPECT_THROW(kernel_from_node(node), Error);
}

void write_proto(const std::filesystem::path& path, const google::protobuf::Message& message) {
  std::ofstream out(path, std::ios::binary);
  ASSERT_TRUE(message.SerializeToOstream(&out)) << path;
}

onnx::TensorProto tensor_proto(const std::vector<int64_t>& dims, const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float v : values) t.add_float_data(v);
  return t;
}

// y = -(x + c) with c a Constant: runs node by node, the Add's output shaped by inference.
TEST(ConformanceRunner, RunsAMultiNodeModelNodeByNode) {
  testing::OnnxBuilder builder;
  builder.input("x", {2, 2}).output("y", {2, 2});
  auto& constant = builder.node("Constant", {}, {"c"});
  auto* value = constant.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  *value->mutable_t() = tensor_proto({2}, {1.0f, -1.0f});
  builder.node("Add", {"x", "c"}, {"sum"});
  builder.node("Neg", {"sum"}, {"y"});

  const auto dir = std::filesystem::temp_directory_path() /
                   ("piper_conformance_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "test_data_set_0");
  write_proto(dir / "model.onnx", builder.model());
  const std::vector<float> x = {0.0f, 0.5f, 1.0f, 2.0f};
  std::vector<float> y;
  for (size_t i = 0; i < x.size(); ++i) y.push_back(-(x[i] + (i % 2 ? -1.0f : 1.0f)));
  write_proto(dir / "test_data_set_0" / "input_0.pb", tensor_proto({2, 2}, x));
  write_proto(dir / "test_data_set_0" / "output_0.pb", tensor_proto({2, 2}, y));

  const TestCase test = load_test_case(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(test.unsupported, "");
  ASSERT_EQ(test.data_sets.size(), 1u);
  ASSERT_EQ(test.data_sets[0].intermediates.count("sum"), 1u);
  EXPECT_EQ(test.data_sets[0].intermediates.at("sum").shape, (engine::Shape{2, 2}));

  engine::cpu::CpuBackend backend;
  const auto outputs = run_data_set(backend, test, test.data_sets[0]);
  ASSERT_EQ(outputs.size(), 1u);
  const Comparison c = compare(outputs[0], test.data_sets[0].outputs[0], Tolerance{});
  EXPECT_TRUE(c.ok) << c.detail;
}

// y = -Reshape(-x, Shape(s)): the Shape node is folded on the host, and its value sizes the
// intermediate Reshape output through a second round of shape inference.
TEST(ConformanceRunner, FoldsShapeNodesToSizeIntermediates) {
  testing::OnnxBuilder builder;
  builder.input("x", {2, 3}).input("s", {3, 2}).output("y", {3, 2});
  builder.node("Neg", {"x"}, {"n"});
  builder.node("Shape", {"s"}, {"shape"});
  builder.node("Reshape", {"n", "shape"}, {"r"});
  builder.node("Neg", {"r"}, {"y"});

  const auto dir = std::filesystem::temp_directory_path() /
                   ("piper_conformance_shape_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "test_data_set_0");
  write_proto(dir / "model.onnx", builder.model());
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  write_proto(dir / "test_data_set_0" / "input_0.pb", tensor_proto({2, 3}, x));
  write_proto(dir / "test_data_set_0" / "input_1.pb", tensor_proto({3, 2}, {0, 0, 0, 0, 0, 0}));
  write_proto(dir / "test_data_set_0" / "output_0.pb", tensor_proto({3, 2}, x));

  const TestCase test = load_test_case(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(test.unsupported, "");
  const DataSet& data = test.data_sets.at(0);
  ASSERT_EQ(data.intermediates.count("r"), 1u);
  EXPECT_EQ(data.intermediates.at("r").shape, (engine::Shape{3, 2}));
  EXPECT_EQ(data.intermediates.count("shape"), 0u);  // folded, never a kernel output

  engine::cpu::CpuBackend backend;
  const auto outputs = run_data_set(backend, test, data);
  ASSERT_EQ(outputs.size(), 1u);
  const Comparison c = compare(outputs[0], data.outputs[0], Tolerance{});
  EXPECT_TRUE(c.ok) << c.detail;
}

}  // namespace
}  // namespace piper::conformance
