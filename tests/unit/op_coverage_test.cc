// The planner accepts an op only if the CPU engine can run it: every op type it accepts has a
// CPU kernel, and every dtype its table (planner/autodiff/op_dtypes.h) promises for an op
// prepares a CPU kernel. Gradient and optimizer ops are covered by gradient_check_test and the
// optimizer tests, which plan and run them.
#include <gmock/gmock.h>
#include <unistd.h>

#include <filesystem>

#include "engine/cpu/cpu_backend.h"
#include "engine_test_util.h"
#include "formats/atomic_file.h"
#include "formats/error.h"
#include "onnx_builder.h"
#include "planner/autodiff/autodiff.h"
#include "planner/autodiff/op_dtypes.h"
#include "planner/plan_model.h"

namespace piper {
namespace {

using engine::testing::Int;
using engine::testing::Ints;
using engine::testing::KernelRunner;
using engine::testing::Str;

TEST(OpCoverage, EveryOpThePlannerAcceptsHasACpuKernel) {
  const auto kernels = engine::cpu::CpuBackend().supported_ops();
  for (const std::string& type : planner::supported_op_types()) {
    EXPECT_TRUE(std::binary_search(kernels.begin(), kernels.end(), type))
        << "the planner accepts " << type << " but the CPU backend has no kernel for it";
  }
  for (const char* type : {"piper.SGD", "piper.AdamW"}) {
    EXPECT_TRUE(std::binary_search(kernels.begin(), kernels.end(), std::string(type))) << type;
  }
}

TEST(OpCoverage, EveryOnnxOpThePlannerAcceptsHasDtypes) {
  for (const std::string& type : planner::supported_op_types()) {
    if (type.rfind("piper.", 0) == 0) continue;  // made by the planner's own passes
    EXPECT_TRUE(planner::op_dtypes().count(type))
        << type << " has no entry in planner/autodiff/op_dtypes.cc";
  }
}

// A tensor of a sample kernel; dtype kT stands for the dtype under test. `values` fill int64
// tensors (and kT ones, converted) that kernels read when they are prepared or run.
constexpr plan::DType kT = plan::DTYPE_UNSPECIFIED;
struct Arg {
  engine::Shape shape;
  plan::DType dtype = kT;
  std::vector<int64_t> values = {};
};
constexpr plan::DType kF = plan::FLOAT32, kI = plan::INT64, kB = plan::BOOL;

struct Sample {
  std::vector<Arg> inputs, outputs;
  std::vector<plan::Attribute> attributes = {};
};

Sample unary() { return {{{{2, 3}}}, {{{2, 3}}}}; }
Sample binary() { return {{{{2, 3}}, {{3}}}, {{{2, 3}}}}; }
Sample compare() { return {{{{2, 3}}, {{3}}}, {{{2, 3}, kB}}}; }
Sample reduce() { return {{{{2, 3}}, {{1}, kI, {1}}}, {{{2, 1}}}}; }
Sample product() { return {{{{2, 3}}, {{3, 4}}}, {{{2, 4}}}}; }
Sample same_elements(Arg shape_input, engine::Shape out) {
  return {{{{2, 3}}, shape_input}, {{out}}};
}

// One kernel per op type of the table, whose selecting tensor (input or output `index`) is kT.
const std::map<std::string, Sample>& samples() {
  static const std::map<std::string, Sample> kSamples = {
      {"Abs", unary()},
      {"Acos", unary()},
      {"Acosh", unary()},
      {"Add", binary()},
      {"And", compare()},
      {"ArgMax", {{{{2, 3}}}, {{{1, 3}, kI}}}},
      {"ArgMin", {{{{2, 3}}}, {{{1, 3}, kI}}}},
      {"Asin", unary()},
      {"Asinh", unary()},
      {"Atan", unary()},
      {"Atanh", unary()},
      {"Cast", {{{{2, 3}}}, {{{2, 3}, kF}}, {Int("to", 1)}}},
      {"CastLike", {{{{2, 3}}, {{1}, kF}}, {{{2, 3}, kF}}}},
      {"Ceil", unary()},
      {"Celu", unary()},
      {"Clip", unary()},
      {"Concat", {{{{2, 3}}, {{2, 1}}}, {{{2, 4}}}, {Int("axis", 1)}}},
      {"ConstantOfShape", {{{{2}, kI, {2, 3}}}, {{{2, 3}}}}},
      {"Cos", unary()},
      {"Cosh", unary()},
      {"CumSum", {{{{2, 3}}, {{}, kI, {1}}}, {{{2, 3}}}}},
      {"Div", binary()},
      {"Dropout", unary()},
      {"Einsum", {product().inputs, product().outputs, {Str("equation", "ij,jk->ik")}}},
      {"Elu", unary()},
      {"Equal", compare()},
      {"Erf", unary()},
      {"Exp", unary()},
      {"Expand", {{{{3, 1}}, {{2}, kI, {3, 3}}}, {{{3, 3}}}}},
      {"Flatten", {{{{2, 3, 1}}}, {{{2, 3}}}}},
      {"Floor", unary()},
      {"Gather", {{{{4, 3}}, {{2}, kI, {0, 3}}}, {{{2, 3}}}}},
      {"GatherElements", {{{{2, 3}}, {{2, 2}, kI, {0, 1, 2, 0}}}, {{{2, 2}}}}},
      {"GatherND", {{{{2, 3}}, {{2, 2}, kI, {0, 1, 1, 2}}}, {{{2}}}}},
      {"Gemm", product()},
      {"Greater", compare()},
      {"GreaterOrEqual", compare()},
      {"HardSigmoid", unary()},
      {"HardSwish", unary()},
      {"Hardmax", unary()},
      {"Identity", unary()},
      {"IsInf", {{{{2, 3}}}, {{{2, 3}, kB}}}},
      {"IsNaN", {{{{2, 3}}}, {{{2, 3}, kB}}}},
      {"LayerNormalization", {{{{2, 3}}, {{3}}, {{3}}}, {{{2, 3}}}, {Int("axis", -1)}}},
      {"LeakyRelu", unary()},
      {"Less", compare()},
      {"LessOrEqual", compare()},
      {"Log", unary()},
      {"LogSoftmax", unary()},
      {"MatMul", product()},
      {"Max", binary()},
      {"Mean", binary()},
      {"Min", binary()},
      {"Mod", binary()},
      {"Mul", binary()},
      {"Neg", unary()},
      {"NegativeLogLikelihoodLoss", {{{{2, 3}}, {{2}, kI, {0, 2}}}, {{{}}}}},
      {"NonZero", {{{{2, 3}}}, {{{2, 6}, kI}, {{}, kI}}}},
      {"Not", unary()},
      {"OneHot", {{{{3}, kI, {0, 1, 3}}, {{}, kI, {4}}, {{2}, kT, {0, 1}}}, {{{3, 4}}}}},
      {"Or", compare()},
      {"PRelu", binary()},
      {"Pow", binary()},
      {"Range", {{{{}, kT, {0}}, {{}, kT, {3}}, {{}, kT, {1}}}, {{{3}}}}},
      {"Reciprocal", unary()},
      {"ReduceL1", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"ReduceL2", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"ReduceLogSum", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"ReduceLogSumExp", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"ReduceMax", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"ReduceMean", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"ReduceMin", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"ReduceProd", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"ReduceSum", reduce()},
      {"ReduceSumSquare", {{{{2, 3}}}, {{{2, 1}}}, {Ints("axes", {1})}}},
      {"Relu", unary()},
      {"Reshape", same_elements({{2}, kI, {3, 2}}, {3, 2})},
      {"Round", unary()},
      {"ScatterElements", {{{{2, 3}}, {{1, 2}, kI, {2, 0}}, {{1, 2}}}, {{{2, 3}}}}},
      {"ScatterND", {{{{4}}, {{2, 1}, kI, {3, 0}}, {{2}}}, {{{4}}}}},
      {"Selu", unary()},
      {"Sigmoid", unary()},
      {"Sign", unary()},
      {"Sin", unary()},
      {"Sinh", unary()},
      {"Slice", {{{{4, 3}}, {{1}, kI, {0}}, {{1}, kI, {2}}, {{1}, kI, {0}}}, {{{2, 3}}}}},
      {"Softmax", unary()},
      {"SoftmaxCrossEntropyLoss", {{{{2, 3}}, {{2}, kI, {0, 2}}}, {{{}}}}},
      {"Softplus", unary()},
      {"Softsign", unary()},
      {"Split", {{{{2, 4}}, {{2}, kI, {1, 3}}}, {{{2, 1}}, {{2, 3}}}, {Int("axis", 1)}}},
      {"Sqrt", unary()},
      {"Squeeze", {{{{2, 1, 3}}, {{1}, kI, {1}}}, {{{2, 3}}}}},
      {"Sub", binary()},
      {"Sum", binary()},
      {"Tan", unary()},
      {"Tanh", unary()},
      {"ThresholdedRelu", unary()},
      {"Tile", {{{{2, 3}}, {{2}, kI, {2, 1}}}, {{{4, 3}}}}},
      {"TopK", {{{{2, 4}}, {{1}, kI, {2}}}, {{{2, 2}}, {{2, 2}, kI}}}},
      {"Transpose", {{{{2, 3}}}, {{{3, 2}}}}},
      {"Trilu", {{{{3, 3}}}, {{{3, 3}}}}},
      {"Unsqueeze", same_elements({{1}, kI, {0}}, {1, 2, 3})},
      {"Where", {{{{2, 3}, kB}, {{2, 3}}, {{2, 3}}}, {{{2, 3}}}}},
      {"Xor", compare()},
  };
  return kSamples;
}

plan::DType plan_dtype(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kFloat32:
      return kF;
    case ir::DType::kInt64:
      return kI;
    case ir::DType::kBool:
      return kB;
    case ir::DType::kBFloat16:
      return plan::BFLOAT16;
  }
  return kT;
}

int add_tensor(KernelRunner& r, const Arg& arg, plan::DType tested) {
  const plan::DType dtype = arg.dtype == kT ? tested : arg.dtype;
  const int index = r.Output(arg.shape, dtype);
  if (arg.values.empty()) return index;
  if (dtype == kF) {
    r.Set(index, std::vector<float>(arg.values.begin(), arg.values.end()));
  } else if (dtype == kI) {
    std::copy(arg.values.begin(), arg.values.end(), r.Int64Data(index));
  } else {
    auto* bytes = reinterpret_cast<uint8_t*>(r.Int64Data(index));
    for (size_t i = 0; i < arg.values.size(); ++i) bytes[i] = arg.values[i] != 0;
  }
  return index;
}

TEST(OpCoverage, EveryDtypeThePlannerTakesPreparesACpuKernel) {
  for (const auto& [type, accepted] : planner::op_dtypes()) {
    const auto sample = samples().find(type);
    if (sample == samples().end()) {
      ADD_FAILURE() << type << " has dtypes in planner/autodiff/op_dtypes.cc but no sample here";
      continue;
    }
    const Sample& s = sample->second;
    const std::vector<Arg>& selecting = accepted.output ? s.outputs : s.inputs;
    ASSERT_LT(accepted.index, selecting.size()) << type;
    EXPECT_EQ(selecting[accepted.index].dtype, kT)
        << type << ": the sample's selecting tensor must take the tested dtype";
    for (const ir::DType dtype : accepted.dtypes) {
      KernelRunner r;
      std::vector<int> inputs, outputs;
      for (const Arg& arg : s.inputs) inputs.push_back(add_tensor(r, arg, plan_dtype(dtype)));
      for (const Arg& arg : s.outputs) outputs.push_back(add_tensor(r, arg, plan_dtype(dtype)));
      try {
        r.Prepare(type, inputs, outputs, s.attributes);
      } catch (const Error& error) {
        ADD_FAILURE() << "the planner takes " << type << " on " << ir::to_string(dtype)
                      << " but the CPU backend refuses it: " << error.what();
      }
    }
  }
}

// Issue 13: T5's position buckets took Abs of int64; the plan was written, then piper-run
// refused it. An op on a dtype its kernels lack (here an int64 Div of a batch input, which no
// folding removes) is refused when planned, naming the node and what Piper takes.
TEST(OpCoverage, PlanningRefusesAnOpOnADtypeItsKernelsLack) {
  testing::OnnxBuilder b;
  b.input("k", {1, 2}, onnx::TensorProto::INT64);
  b.initializer("w", {2}, {0.5f, -1.5f});
  b.int_initializer("two", {1}, {2});
  b.node("Div", {"k", "two"}, {"half_k"}, "buckets/Div");
  auto& cast = b.node("Cast", {"half_k"}, {"kf"});
  testing::OnnxBuilder::attr(cast, "to", int64_t{1});
  b.node("Mul", {"w", "kf"}, {"weighted"});
  testing::OnnxBuilder::attr(b.node("ReduceSum", {"weighted"}, {"loss"}), "keepdims", int64_t{0});
  b.output("loss", {});
  const auto dir =
      std::filesystem::temp_directory_path() / ("piper_op_dtypes_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model_path = (dir / "model.onnx").string();
  formats::write_file_atomically(model_path, b.model().SerializeAsString());
  strategy::Strategy strategy;
  strategy.source = "op_coverage";
  strategy.global_batch = 1;
  try {
    planner::plan_model(model_path, strategy);
    ADD_FAILURE() << "planned an int64 Div";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(),
                ::testing::HasSubstr("node 'buckets/Div' (Div): input 0 has dtype int64, which "
                                     "Piper's Div does not take (it takes float32)"));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace piper
