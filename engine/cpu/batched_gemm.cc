#include "engine/cpu/batched_gemm.h"

#include <algorithm>
#include <climits>

#include "engine/cpu/parallel.h"
#include "engine/cpu/split_invariant_gemm.h"

namespace piper::engine::cpu {
namespace {

// Multiply-adds below which a GEMM task is neither split nor handed to another thread.
constexpr int64_t kMinTaskWork = int64_t{1} << 20;
// Rows (columns) of C per panel at least. Each panel packs the whole other operand again
// (split_invariant_gemm.cc), so a GEMM is cut into no more panels than there are threads.
constexpr int64_t kMinPanel = 64;

}  // namespace

void BatchedGemm::prepare() {
  const auto batches = static_cast<int64_t>(a_offsets.size());
  bool fold = batches > 1 && !trans_a && lda == k && ldc == n && batches * m <= INT_MAX;
  for (int64_t i = 0; fold && i < batches; ++i) {
    fold = b_offsets[i] == b_offsets[0] && a_offsets[i] == a_offsets[0] + i * m * k &&
           c_offsets[i] == c_offsets[0] + i * m * n;
  }
  if (fold) {
    m = static_cast<int>(batches * m);
    a_offsets.resize(1);
    b_offsets.resize(1);
    c_offsets.resize(1);
  }
  split_rows_ = m >= n;
}

void BatchedGemm::run(const float* a, const float* b, float* c, float beta,
                      const float* bias) const {
  if (m == 0 || n == 0) return;
  const auto batches = static_cast<int64_t>(c_offsets.size());
  const int64_t work = int64_t{m} * n * k;
  const int64_t panels = std::clamp<int64_t>(
      std::min((num_threads() + batches - 1) / batches, (split_rows_ ? m : n) / kMinPanel), 1,
      std::max<int64_t>(1, work / kMinTaskWork));
  const int64_t task_work = std::max<int64_t>(1, work / panels);
  parallel_for(batches * panels, (kMinTaskWork + task_work - 1) / task_work,
               [&](int64_t begin, int64_t end) {
                 for (int64_t t = begin; t < end; ++t) run_task(a, b, c, beta, bias, t, panels);
               });
}

// Task t: panel t % panels of batch t / panels.
void BatchedGemm::run_task(const float* a, const float* b, float* c, float beta, const float* bias,
                           int64_t task, int64_t panels) const {
  const auto batch = static_cast<size_t>(task / panels);
  const int64_t panel = task % panels;
  const int64_t length = split_rows_ ? m : n;
  const int64_t first = length * panel / panels;
  const auto size = static_cast<int>(length * (panel + 1) / panels - first);
  const float* pa = a + a_offsets[batch];
  const float* pb = b + b_offsets[batch];
  float* pc = c + c_offsets[batch];
  int rows = m, cols = n;
  if (split_rows_) {
    pa += trans_a ? first : first * lda;
    pc += first * ldc;
    rows = size;
  } else {
    pb += trans_b ? first * ldb : first;
    pc += first;
    if (bias != nullptr) bias += first;
    cols = size;
  }
  split_invariant_sgemm(trans_a, trans_b, rows, cols, k, alpha, pa, lda, pb, ldb, beta, pc, ldc,
                        bias);
}

}  // namespace piper::engine::cpu
