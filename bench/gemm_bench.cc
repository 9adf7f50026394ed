// piper-gemm-bench: the CPU's split-invariant products (engine/cpu/split_invariant_gemm.h)
// against OpenBLAS's sgemm on the same operands, one thread, in one run. Prints GFLOP/s of
// each and their ratio per shape and transpose, and the OpenBLAS kernel set that ran
// (OPENBLAS_CORETYPE chooses it). A benchmark: nothing asserts a time.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "engine/cpu/split_invariant_gemm.h"

extern "C" char* openblas_get_corename(void);

namespace {

struct Shape {
  int m, n, k;
};

// The fastest of `rounds` runs of `product`, in seconds.
template <typename F>
double fastest(int rounds, F product) {
  double best = 1e30;
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    product();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  CLI::App app{"Split-invariant products against OpenBLAS's sgemm, one thread, one run"};
  app.add_option("--rounds", rounds, "runs of each product; the fastest counts")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  openblas_set_num_threads(1);
  std::printf("OpenBLAS kernels %s, one thread, fastest of %d runs\n", openblas_get_corename(),
              rounds);
  std::printf("%5s %5s %5s %3s %3s %14s %14s %6s\n", "M", "N", "K", "tA", "tB", "OpenBLAS GF/s",
              "split-inv GF/s", "ratio");
  const std::vector<Shape> shapes = {{128, 128, 64},   {1024, 64, 64},   {1024, 256, 256},
                                     {1024, 768, 256}, {1024, 256, 768}, {256, 256, 1024},
                                     {2048, 768, 768}};
  std::mt19937 engine(1);
  std::normal_distribution<float> normal;
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n),
        c(static_cast<size_t>(s.m) * s.n);
    for (float& x : a) x = normal(engine);
    for (float& x : b) x = normal(engine);
    // op(A) · op(B) with B transposed (a layer's forward), A transposed (a weight gradient).
    for (const auto& [ta, tb] : {std::pair{false, false}, {false, true}, {true, false}}) {
      const int lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
      const double blas = fastest(rounds, [&] {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
      });
      const double split = fastest(rounds, [&] {
        piper::engine::cpu::split_invariant_sgemm(ta, tb, s.m, s.n, s.k, 1.0f, a.data(), lda,
                                                  b.data(), ldb, 0.0f, c.data(), s.n);
      });
      const double flops = 2.0 * s.m * s.n * s.k;
      std::printf("%5d %5d %5d %3d %3d %14.1f %14.1f %6.2f\n", s.m, s.n, s.k, ta, tb,
                  flops / blas / 1e9, flops / split / 1e9, blas / split);
    }
  }
  return 0;
}
