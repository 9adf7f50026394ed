// Einsum: products (batched, transposed, permuted outputs), one-operand sums (transpose,
// reduction, diagonal), MoE dispatch and combine, three operands, ellipsis broadcasting,
// labels summed in one operand only, an empty contraction, TF32 and a widened bfloat16 case.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

namespace {

OpCase Einsum(const std::string& name, const std::string& equation, std::vector<TensorSpec> inputs,
              const Shape& output, double tolerance = 1e-5) {
  return {"Einsum_" + name, "Einsum", {Str("equation", equation)}, std::move(inputs), {F(output)},
          tolerance,        tolerance};
}

}  // namespace

std::vector<OpCase> EinsumCases() {
  std::vector<OpCase> cases = {
      Einsum("matmul", "ij,jk->ik", {F({3, 4}), F({4, 5})}, {3, 5}),
      Einsum("batched", "bij,bjk->bik", {F({2, 3, 4}), F({2, 4, 5})}, {2, 3, 5}),
      Einsum("swapped_output", "ij,jk->ki", {F({3, 4}), F({4, 5})}, {5, 3}),
      Einsum("permuted_output", "bij,bjk->kib", {F({2, 3, 4}), F({2, 4, 5})}, {5, 3, 2}),
      Einsum("attention", "bqhd,bkhd->bhqk", {F({2, 4, 3, 5}), F({2, 6, 3, 5})}, {2, 3, 4, 6}),
      Einsum("transpose", "ij->ji", {F({3, 4})}, {4, 3}),
      Einsum("reduce_rows", "ij->i", {F({3, 4})}, {3}),
      Einsum("reduce_all", "ij->", {F({30, 40})}, {}),
      Einsum("diagonal", "ii->i", {F({4, 4})}, {4}),
      Einsum("batched_diagonal", "...ii->...i", {F({2, 3, 3})}, {2, 3}),
      Einsum("moe_dispatch", "sec,sm->ecm", {F({6, 3, 2}), F({6, 5})}, {3, 2, 5}),
      Einsum("moe_combine", "sec,ecm->sm", {F({6, 3, 2}), F({3, 2, 5})}, {6, 5}),
      Einsum("moe_gate", "bsd,bse->ed", {F({2, 6, 5}), F({2, 6, 3})}, {3, 5}),
      Einsum("three_operands", "ab,bc,cd->ad", {F({2, 3}), F({3, 4}), F({4, 5})}, {2, 5}),
      Einsum("three_outer", "bi,bj,bk->ijk", {F({3, 2}), F({3, 4}), F({3, 2})}, {2, 4, 2}),
      Einsum("ellipsis_broadcast", "...ij,...jk->...ik", {F({2, 3, 4, 5}), F({3, 5, 2})},
             {2, 3, 4, 2}),
      Einsum("size_one_batch", "bij,bjk->bik", {F({1, 3, 4}), F({2, 4, 5})}, {2, 3, 5}),
      Einsum("summed_in_one", "ijk,jl->il", {F({2, 3, 4}), F({3, 5})}, {2, 5}),
      Einsum("outer", "i,j->ij", {F({3}), F({4})}, {3, 4}),
      Einsum("dot", "i,i", {F({7}), F({7})}, {}),
      Einsum("empty_contraction", "ij,jk->ik", {F({2, 0}), F({0, 3})}, {2, 3}),
      Einsum("tf32", "ij,jk->ik", {F({16, 32}), F({32, 8})}, {16, 8}, 1e-2),
      {"Einsum_bfloat16",
       "Einsum",
       {Str("equation", "bij,bjk->bik")},
       {BF({2, 3, 4}), BF({2, 4, 5})},
       {BF({2, 3, 5})},
       1e-2,
       1e-2},
  };
  cases[cases.size() - 2].attributes.push_back(Int("tf32", 1));
  return cases;
}

}  // namespace piper::engine::testing
