// Matrix products: every transpose combination, vectors, broadcast batches (one B for
// every batch folds into one product; broadcasting on both sides splits into runs), and
// piper.MatMul's bias and GELU epilogues.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {

std::vector<OpCase> GemmCases() {
  return {
      {"MatMul_2d", "MatMul", {}, {F({33, 17}), F({17, 65})}, {F({33, 65})}},
      {"MatMul_batched_shared_B", "MatMul", {}, {F({4, 16, 32}), F({32, 8})}, {F({4, 16, 8})}},
      {"MatMul_batched", "MatMul", {}, {F({2, 3, 5, 7}), F({2, 3, 7, 4})}, {F({2, 3, 5, 4})}},
      {"MatMul_broadcast_both",
       "MatMul",
       {},
       {F({2, 1, 5, 7}), F({1, 3, 7, 4})},
       {F({2, 3, 5, 4})}},
      {"MatMul_shared_A", "MatMul", {}, {F({5, 7}), F({3, 7, 4})}, {F({3, 5, 4})}},
      {"MatMul_vector_matrix", "MatMul", {}, {F({7}), F({7, 4})}, {F({4})}},
      {"MatMul_matrix_vector", "MatMul", {}, {F({3, 7}), F({7})}, {F({3})}},
      {"MatMul_empty_K", "MatMul", {}, {F({3, 0}), F({0, 4})}, {F({3, 4})}},
      {"PiperMatMul_transA",
       "piper.MatMul",
       {Int("transA", 1)},
       {F({4, 16, 32}), F({4, 16, 8})},
       {F({4, 32, 8})}},
      {"PiperMatMul_transB",
       "piper.MatMul",
       {Int("transB", 1)},
       {F({4, 16, 32}), F({8, 32})},
       {F({4, 16, 8})}},
      {"PiperMatMul_bias_transB",
       "piper.MatMul",
       {Int("transB", 1)},
       {F({2, 5, 7}), F({9, 7}), F({9})},
       {F({2, 5, 9})}},
      // The tanh GELU in the epilogue: with a bias and PreActivation (aligned shapes, where
      // cuBLASLt has the epilogue), without either, and with odd shapes (Piper's GELU after).
      {"PiperMatMul_gelu_bias_preactivation",
       "piper.MatMul",
       {Int("transB", 1), Str("activation", "gelu_tanh")},
       {F({4, 16, 64}, -2, 2), F({32, 64}), F({32})},
       {F({4, 16, 32}), F({4, 16, 32})},
       1e-5,
       1e-5},
      {"PiperMatMul_gelu",
       "piper.MatMul",
       {Int("transB", 1), Str("activation", "gelu_tanh")},
       {F({64, 32}, -2, 2), F({16, 32})},
       {F({64, 16})},
       1e-5,
       1e-5},
      {"PiperMatMul_gelu_odd_shapes",
       "piper.MatMul",
       {Str("activation", "gelu_tanh")},
       {F({3, 5, 7}, -2, 2), F({7, 9}), F({9})},
       {F({3, 5, 9}), F({3, 5, 9})},
       1e-5,
       1e-5},
      {"PiperMatMul_transAB",
       "piper.MatMul",
       {Int("transA", 1), Int("transB", 1)},
       {F({2, 9, 5}), F({2, 6, 9})},
       {F({2, 5, 6})}},
      {"Gemm_bias", "Gemm", {Int("transB", 1)}, {F({8, 16}), F({32, 16}), F({32})}, {F({8, 32})}},
      {"Gemm_alpha_beta",
       "Gemm",
       {Float("alpha", 0.5), Float("beta", -2.0), Int("transA", 1)},
       {F({16, 8}), F({16, 4}), F({8, 1})},
       {F({8, 4})}},
      {"Gemm_no_C", "Gemm", {}, {F({3, 5}), F({5, 2})}, {F({3, 2})}},
      {"Gemm_empty_K", "Gemm", {Float("beta", 3.0)}, {F({3, 0}), F({0, 2}), F({2})}, {F({3, 2})}},
  };
}

}  // namespace piper::engine::testing
