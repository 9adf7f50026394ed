// CPU elementwise kernels: broadcasting binary ops, Sum, activations and their gradients.
#include <gmock/gmock.h>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuElementwise, AddSameShape) {
  KernelRunner k;
  const int a = k.Input({2, 2}, {1, 2, 3, 4});
  const int b = k.Input({2, 2}, {10, 20, 30, 40});
  const int y = k.Output({2, 2});
  k.Run("Add", {a, b}, {y});
  EXPECT_THAT(k.Floats(y), ElementsAre(11, 22, 33, 44));
}

TEST(CpuElementwise, AddBroadcastsRowAndColumn) {
  KernelRunner k;
  const int col = k.Input({2, 1}, {1, 2});
  const int row = k.Input({3}, {10, 20, 30});
  const int y = k.Output({2, 3});
  k.Run("Add", {col, row}, {y});
  EXPECT_THAT(k.Floats(y), ElementsAre(11, 21, 31, 12, 22, 32));
}

TEST(CpuElementwise, ScalarOperandOnEitherSide) {
  KernelRunner k;
  const int s = k.Input({}, {2});
  const int x = k.Input({3}, {1, 2, 4});
  const int y1 = k.Output({3});
  const int y2 = k.Output({3});
  k.Run("Div", {s, x}, {y1});
  k.Run("Sub", {x, s}, {y2});
  EXPECT_THAT(k.Floats(y1), ElementsAre(2, 1, 0.5));
  EXPECT_THAT(k.Floats(y2), ElementsAre(-1, 0, 2));
}

// Every binary op on 4-D shapes that broadcast both ways, against a naive index reference.
TEST(CpuElementwise, BinaryOpsMatchNaiveBroadcastReference) {
  const Shape a_shape = {2, 1, 3, 1};
  const Shape b_shape = {4, 1, 5};
  const Shape y_shape = {2, 4, 3, 5};
  const std::vector<float> av = TestValues(num_elements(a_shape), 1);
  std::vector<float> bv = TestValues(num_elements(b_shape), 2);
  for (auto& v : bv) v += v >= 0 ? 0.5f : -0.5f;  // keep Div away from 0
  struct Case {
    const char* op;
    double (*f)(double, double);
  };
  const Case cases[] = {{"Add", [](double a, double b) { return a + b; }},
                        {"Sub", [](double a, double b) { return a - b; }},
                        {"Mul", [](double a, double b) { return a * b; }},
                        {"Div", [](double a, double b) { return a / b; }}};
  for (const Case& c : cases) {
    KernelRunner k;
    const int a = k.Input(a_shape, av);
    const int b = k.Input(b_shape, bv);
    const int y = k.Output(y_shape);
    k.Run(c.op, {a, b}, {y});
    std::vector<double> expected;
    for (int64_t i = 0; i < num_elements(y_shape); ++i) {
      const auto index = Unravel(i, y_shape);
      expected.push_back(
          c.f(av[BroadcastOffset(index, a_shape)], bv[BroadcastOffset(index, b_shape)]));
    }
    ExpectNear(k.Floats(y), expected, 1e-6, c.op, 1e-6);
  }
}

TEST(CpuElementwise, Int64AddAndNeg) {
  KernelRunner k;
  const int a = k.IntInput({2}, {1, -5});
  const int b = k.IntInput({1}, {3});
  const int y = k.Output({2}, plan::INT64);
  const int z = k.Output({2}, plan::INT64);
  k.Run("Add", {a, b}, {y});
  k.Run("Neg", {a}, {z});
  EXPECT_THAT(k.Int64s(y), ElementsAre(4, -2));
  EXPECT_THAT(k.Int64s(z), ElementsAre(-1, 5));
}

TEST(CpuElementwise, SumOfThreeBroadcastInputs) {
  KernelRunner k;
  const int a = k.Input({2, 3}, {1, 2, 3, 4, 5, 6});
  const int b = k.Input({3}, {10, 20, 30});
  const int c = k.Input({2, 1}, {100, 200});
  const int y = k.Output({2, 3});
  k.Run("Sum", {a, b, c}, {y});
  EXPECT_THAT(k.Floats(y), ElementsAre(111, 122, 133, 214, 225, 236));
}

TEST(CpuElementwise, SumOfOneInputCopies) {
  KernelRunner k;
  const int a = k.Input({3}, {1, 2, 3});
  const int y = k.Output({3});
  k.Run("Sum", {a}, {y});
  EXPECT_THAT(k.Floats(y), ElementsAre(1, 2, 3));
}

TEST(CpuElementwise, Activations) {
  KernelRunner k;
  const std::vector<float> xv = {-100.0f, -2.0f, -0.5f, 0.0f, 0.5f, 3.0f, 100.0f};
  const int x = k.Input({7}, xv);
  const int relu = k.Output({7});
  const int tanh = k.Output({7});
  const int sigmoid = k.Output({7});
  const int neg = k.Output({7});
  k.Run("Relu", {x}, {relu});
  k.Run("Tanh", {x}, {tanh});
  k.Run("Sigmoid", {x}, {sigmoid});
  k.Run("Neg", {x}, {neg});
  std::vector<double> e_relu, e_tanh, e_sigmoid, e_neg;
  for (float v : xv) {
    e_relu.push_back(v > 0 ? v : 0);
    e_tanh.push_back(std::tanh(static_cast<double>(v)));
    e_sigmoid.push_back(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
    e_neg.push_back(-v);
  }
  ExpectNear(k.Floats(relu), e_relu, 0, "Relu");
  ExpectNear(k.Floats(tanh), e_tanh, 1e-6, "Tanh");
  ExpectNear(k.Floats(sigmoid), e_sigmoid, 1e-7, "Sigmoid", 1e-6);
  ExpectNear(k.Floats(neg), e_neg, 0, "Neg");
}

TEST(CpuElementwise, ActivationGradients) {
  KernelRunner k;
  const int dy = k.Input({4}, {1, 2, 3, 4});
  const int yv = k.Input({4}, {-0.5f, 0.0f, 0.25f, 0.9f});
  const int relu = k.Output({4});
  const int tanh = k.Output({4});
  const int sigmoid = k.Output({4});
  k.Run("piper.ReluGrad", {dy, yv}, {relu});
  k.Run("piper.TanhGrad", {dy, yv}, {tanh});
  k.Run("piper.SigmoidGrad", {dy, yv}, {sigmoid});
  ExpectNear(k.Floats(relu), {0, 0, 3, 4}, 0, "ReluGrad");
  ExpectNear(k.Floats(tanh), {1 * 0.75, 2 * 1.0, 3 * (1 - 0.0625), 4 * (1 - 0.81)}, 1e-6,
             "TanhGrad");
  ExpectNear(k.Floats(sigmoid), {1 * -0.5 * 1.5, 0, 3 * 0.25 * 0.75, 4 * 0.9 * 0.1}, 1e-6,
             "SigmoidGrad");
}

TEST(CpuElementwise, RejectsWrongOutputShape) {
  KernelRunner k;
  const int a = k.Input({2, 3}, TestValues(6));
  const int b = k.Input({3}, TestValues(3));
  const int y = k.Output({3, 2});
  try {
    k.Prepare("Add", {a, b}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(),
                HasSubstr("Add: inputs broadcast to [2, 3] but the output has shape [3, 2]"));
  }
}

TEST(CpuElementwise, RejectsIncompatibleShapesAndDtypes) {
  KernelRunner k;
  const int a = k.Input({2, 3}, TestValues(6));
  const int b = k.Input({2}, TestValues(2));
  const int i = k.IntInput({3}, {1, 2, 3});
  const int y = k.Output({2, 3});
  EXPECT_THROW(k.Prepare("Mul", {a, b}, {y}), Error);
  try {
    k.Prepare("Mul", {a, i}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("input 1 has dtype int64, expected float32"));
  }
}

TEST(CpuBackend, UnsupportedOpListsSupportedOps) {
  KernelRunner k;
  const int x = k.Input({1}, {1});
  const int y = k.Output({1});
  try {
    k.Prepare("Conv", {x}, {y});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("op type 'Conv' is not supported by the cpu backend"));
    EXPECT_THAT(error.what(), HasSubstr("Gemm"));
    EXPECT_THAT(error.what(), HasSubstr("piper.AdamW"));
  }
}

TEST(CpuBackend, AllocateIsZeroedAndAligned) {
  cpu::CpuBackend backend;
  for (size_t bytes : {0, 1, 100, 4096}) {
    auto* data = static_cast<unsigned char*>(backend.allocate(bytes));
    ASSERT_NE(data, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(data[i], 0);
    backend.release(data);
  }
}

}  // namespace
}  // namespace piper::engine::testing
