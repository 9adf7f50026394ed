// Intra-op parallelism of the CPU kernels: one process-wide pool of threads that
// parallel_for spreads a loop over. After a loop the pool's threads poll for the next one for
// 2 ms, yielding their cores to any other runnable thread, and then sleep.
#pragma once

#include <cstdint>

namespace piper::engine::cpu {

// Elements of a simple memory-bound loop (a few operations per element) worth handing to
// another thread: a grain for elementwise kernels.
constexpr int64_t kParallelGrain = int64_t{1} << 15;

// The threads a parallel_for uses, the caller's included: the last set_num_threads() value,
// else OMP_NUM_THREADS when set to a positive number, else the CPUs this process may run on.
int num_threads();

// Sets num_threads() (at least 1) for later parallel_for calls; the pool is rebuilt on the
// next call.
void set_num_threads(int threads);

namespace detail {
// Runs call(body, c) for every chunk c in [0, chunks) on the pool and the caller's thread;
// see parallel_for.
void parallel_run(int64_t chunks, void (*call)(const void* body, int64_t chunk), const void* body);
// How many chunks parallel_for cuts n iterations into: 1 when n < 2 * grain or when one
// thread is configured.
int64_t chunk_count(int64_t n, int64_t grain);
}  // namespace detail

// Calls body(begin, end) on disjoint ranges that together cover [0, n), on up to num_threads()
// threads at once, and returns when all calls have returned; the first exception a call threw
// is rethrown here. Ranges hold at least `grain` iterations (choose it so that a range is worth
// a thread's wake-up: some tens of microseconds of work), except when n itself is smaller.
// Runs body(0, n) inline when n < 2 * grain, when called from inside a parallel_for's body, and
// when another thread is using the pool.
//
// Each thread first runs its own equal share of the ranges, in order (the caller the first
// share), then helps with what is left of the others': a kernel that cuts its rows as the kernel
// before it did mostly reads what its own thread wrote, which matters where a VM's cores are
// far apart (parallel.cc).
//
// How [0, n) is cut depends on n, grain and num_threads(): a body's result must not depend on
// its range. A sum over the loop must not add up per-range partial sums; give each block of a
// fixed size its own partial sum instead (parallel_for over block indices) and add the blocks
// in order afterwards, so results do not change with the thread count.
template <typename F>
void parallel_for(int64_t n, int64_t grain, const F& body) {
  if (n <= 0) return;
  const int64_t chunks = detail::chunk_count(n, grain);
  if (chunks <= 1) {
    body(int64_t{0}, n);
    return;
  }
  struct Split {
    const F& body;
    int64_t n, chunks;
  } split{body, n, chunks};
  detail::parallel_run(
      chunks,
      [](const void* p, int64_t c) {
        const auto& s = *static_cast<const Split*>(p);
        s.body(s.n * c / s.chunks, s.n * (c + 1) / s.chunks);
      },
      &split);
}

}  // namespace piper::engine::cpu
