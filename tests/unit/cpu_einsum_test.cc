// CPU Einsum against a naive reference (a loop over every label assignment),
// over the forms MoE dispatch/combine and attention export, diagonals,
// reductions, ellipses, implicit outputs, three operands and the layouts that
// force packing or a permuted output; plus the equation parser.
#include <gmock/gmock.h>

#include <map>

#include "engine_test_util.h"
#include "formats/einsum.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// sum over all label values of the product of the operands, per output element.
std::vector<double> NaiveEinsum(const std::string& text, const std::vector<Shape>& shapes,
                                const std::vector<std::vector<float>>& values, Shape* out_shape) {
  std::vector<size_t> ranks;
  for (const auto& s : shapes) ranks.push_back(s.size());
  const formats::EinsumEquation eq = formats::parse_einsum(text, ranks);
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      int64_t& size = sizes[eq.inputs[i][d]];
      size = std::max(size, shapes[i][d]);
    }
  }
  std::vector<int> labels;
  for (const auto& [label, size] : sizes) labels.push_back(label);
  out_shape->clear();
  for (int label : eq.output) out_shape->push_back(sizes[label]);
  std::vector<double> out(static_cast<size_t>(num_elements(*out_shape)), 0.0);
  std::map<int, int64_t> at;
  int64_t total = 1;
  for (int label : labels) total *= sizes[label];
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    for (size_t l = labels.size(); l-- > 0;) {
      at[labels[l]] = rest % sizes[labels[l]];
      rest /= sizes[labels[l]];
    }
    double product = 1.0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      int64_t offset = 0;
      for (size_t d = 0; d < shapes[i].size(); ++d) {
        offset = offset * shapes[i][d] + (shapes[i][d] == 1 ? 0 : at[eq.inputs[i][d]]);
      }
      product *= values[i][offset];
    }
    int64_t o = 0;
    for (size_t d = 0; d < eq.output.size(); ++d) o = o * (*out_shape)[d] + at[eq.output[d]];
    out[o] += product;
  }
  return out;
}

void CheckEinsum(const std::string& equation, const std::vector<Shape>& shapes) {
  SCOPED_TRACE(equation);
  KernelRunner r;
  std::vector<std::vector<float>> values;
  std::vector<int> inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    values.push_back(TestValues(num_elements(shapes[i]), static_cast<uint32_t>(i + 3)));
    inputs.push_back(r.Input(shapes[i], values.back()));
  }
  Shape out_shape;
  const std::vector<double> expected = NaiveEinsum(equation, shapes, values, &out_shape);
  const int y = r.Output(out_shape);
  r.Set(y, std::vector<float>(expected.size(), 42.0f));  // every element must be written
  const auto kernel = r.Prepare("Einsum", inputs, {y}, {Str("equation", equation)});
  kernel->run({});
  ExpectNear(r.Floats(y), expected, 1e-5, equation, 1e-5);
  kernel->run({});  // scratch buffers are reused correctly
  ExpectNear(r.Floats(y), expected, 1e-5, equation + " (second run)", 1e-5);
}

TEST(CpuEinsum, MoEDispatchAndCombine) {
  CheckEinsum("sec,sm->ecm", {{6, 3, 2}, {6, 5}});
  CheckEinsum("sec,ecm->sm", {{6, 3, 2}, {3, 2, 5}});
  CheckEinsum("bsec,bsm->becm", {{2, 6, 3, 2}, {2, 6, 5}});
}

TEST(CpuEinsum, AttentionForms) {
  CheckEinsum("bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}});
  CheckEinsum("bhqk,bhkd->bhqd", {{2, 3, 4, 6}, {2, 3, 6, 5}});
  CheckEinsum("bqhd,bkhd->bhqk", {{2, 4, 3, 5}, {2, 6, 3, 5}});
}

TEST(CpuEinsum, MatrixProductsAndTheirTransposes) {
  CheckEinsum("ij,jk->ik", {{3, 4}, {4, 5}});
  CheckEinsum("ji,jk->ik", {{4, 3}, {4, 5}});
  CheckEinsum("ij,kj->ik", {{3, 4}, {5, 4}});
  CheckEinsum("ij,jk->ki", {{3, 4}, {4, 5}});
  CheckEinsum("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}});
  CheckEinsum("bij,jk->bik", {{2, 3, 4}, {4, 5}});
  CheckEinsum("bij,bjk->kib", {{2, 3, 4}, {2, 4, 5}});  // permuted output
  CheckEinsum("i,i", {{7}, {7}});
  CheckEinsum("i,j->ij", {{3}, {4}});
  CheckEinsum("ijk,jkl->il", {{2, 3, 4}, {3, 4, 5}});
  CheckEinsum("ikj,jkl->il", {{2, 4, 3}, {3, 4, 5}});  // contracted labels out of order
}

TEST(CpuEinsum, LabelsSummedInOneOperandOnly) {
  CheckEinsum("ijk,jl->il", {{2, 3, 4}, {3, 5}});
  CheckEinsum("ij,kl->il", {{2, 3}, {4, 5}});
}

TEST(CpuEinsum, SingleOperand) {
  CheckEinsum("ij->ji", {{3, 4}});
  CheckEinsum("ij->i", {{3, 4}});
  CheckEinsum("ij->", {{3, 4}});
  CheckEinsum("ii->i", {{4, 4}});
  CheckEinsum("ii", {{4, 4}});
  CheckEinsum("...ii->...i", {{2, 3, 3}});
  CheckEinsum("ij", {{3, 4}});
  CheckEinsum("ba", {{3, 4}});  // implicit output is alphabetical: a transpose
}

TEST(CpuEinsum, EllipsisAndBroadcast) {
  CheckEinsum("...ij,...jk->...ik", {{2, 3, 4, 5}, {3, 5, 2}});
  CheckEinsum("...ij,jk", {{2, 3, 4}, {4, 5}});
  CheckEinsum("bij,bjk->bik", {{1, 3, 4}, {2, 4, 5}});
}

TEST(CpuEinsum, ThreeOperands) {
  CheckEinsum("ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}});
  CheckEinsum("bi,bj,bk->ijk", {{3, 2}, {3, 4}, {3, 2}});
}

TEST(CpuEinsum, EmptyContractionGivesZeros) { CheckEinsum("ij,jk->ik", {{2, 0}, {0, 3}}); }

TEST(CpuEinsum, RejectsShapeMismatches) {
  KernelRunner r;
  const int a = r.Input({2, 3}, TestValues(6));
  const int b = r.Input({4, 5}, TestValues(20));
  const int y = r.Output({2, 5});
  try {
    r.Prepare("Einsum", {a, b}, {y}, {Str("equation", "ij,jk->ik")});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("Einsum: operand 1 [4, 5] gives dimension 0 size 4"));
  }
  const int c = r.Input({3, 5}, TestValues(15));
  const int wrong = r.Output({5, 2});
  EXPECT_THROW(r.Prepare("Einsum", {a, c}, {wrong}, {Str("equation", "ij,jk->ik")}), Error);
  EXPECT_THROW(r.Prepare("Einsum", {a, c}, {y}, {Str("equation", "ij,jk->iz")}), Error);
  EXPECT_THROW(r.Prepare("Einsum", {a, c}, {y}, {Str("equation", "ij->ij")}), Error);
}

TEST(EinsumEquation, ParsesEllipsisAndImplicitOutput) {
  const auto eq = formats::parse_einsum("...ij, ...jk", {4, 3});
  EXPECT_EQ(eq.inputs[0],
            (std::vector<int>{formats::kEllipsisLabel, formats::kEllipsisLabel + 1, 8, 9}));
  EXPECT_EQ(eq.inputs[1], (std::vector<int>{formats::kEllipsisLabel + 1, 9, 10}));
  EXPECT_EQ(eq.output,
            (std::vector<int>{formats::kEllipsisLabel, formats::kEllipsisLabel + 1, 8, 10}));
  EXPECT_EQ(formats::einsum_string(eq), "abij,bjk->abik");
  EXPECT_EQ(formats::einsum_string(formats::parse_einsum("Ab,bA", {2, 2})), "Ab,bA->");
  EXPECT_EQ(formats::einsum_string(formats::parse_einsum("ba,c", {2, 1})), "ba,c->abc");
}

TEST(EinsumEquation, RejectsMalformedEquations) {
  EXPECT_THROW(formats::parse_einsum("ij,jk->ik", {2}), Error);
  EXPECT_THROW(formats::parse_einsum("ij->i", {3}), Error);
  EXPECT_THROW(formats::parse_einsum("i1->i", {2}), Error);
  EXPECT_THROW(formats::parse_einsum("ij->ii", {2}), Error);
  EXPECT_THROW(formats::parse_einsum("......->", {2}), Error);
}

}  // namespace
}  // namespace piper::engine::testing
