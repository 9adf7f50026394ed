#include "engine/cpu/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace piper::engine::cpu {
namespace {

// How long a waiting thread polls before it sleeps: it spins for kSpin, then yields its core to
// any other runnable thread between polls until kPoll has passed. Waking a sleeping thread
// takes a scheduler round trip, which on a busy machine costs milliseconds; polling bridges
// the gaps between one kernel's loop and the next, and yielding keeps it from holding a core
// that a GEMM, another stream or another rank needs.
constexpr std::chrono::microseconds kSpin{20};
constexpr std::chrono::microseconds kPoll{2000};

// Chunks per thread: a few, so that threads slowed by others still finish close together.
constexpr int64_t kChunksPerThread = 4;

// True on the pool's threads and on a caller while it runs a loop: nested loops run inline.
thread_local bool in_loop = false;

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls while `busy()` holds, for up to kPoll; then returns.
template <typename Busy>
void spin_while(Busy busy) {
  const auto start = std::chrono::steady_clock::now();
  for (auto now = start; busy() && now - start < kPoll; now = std::chrono::steady_clock::now()) {
    if (now - start < kSpin) {
      relax();
    } else {
      std::this_thread::yield();
    }
  }
}

int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);  // "4,2" (nested levels) reads as 4
    if (n > 0) return n;
  }
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return std::max(1, CPU_COUNT(&cpus));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::atomic<int> configured_threads{0};  // 0: not set

// One parallel_for. Each thread that takes part owns an equal run of consecutive chunks, the
// caller the first, pool thread i the (i + 1)-th, and runs them in order; a thread done with its
// own claims the chunks left in the others' runs, so that none waits for a given other one to
// start. Owning the same share of every loop keeps a thread on the rows it wrote in the loop
// before (a GEMM's first panel of rows is the caller's, as are the first rows of the element-wise
// kernel that wrote its input). On a VM whose two cores were at times far apart (a 460 ns round
// trip between them, against 50-70 ns), the benchmark model's 2-thread step took 199 ms with
// chunks claimed in turn from one counter and 188 ms with shares (172 ms either way with the
// cores close).
struct Loop {
  // The chunks [next, end) of one thread's run not yet claimed; a cache line each.
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };

  int64_t chunks = 0;
  void (*call)(const void* body, int64_t chunk) = nullptr;
  const void* body = nullptr;
  std::vector<Share> shares;
  std::atomic<int64_t> done{0};
  std::mutex mutex;  // guards error; orders the last chunk's notify with wait_done's check
  std::condition_variable finished;
  std::exception_ptr error;

  Loop(int64_t chunk_count, void (*chunk_call)(const void*, int64_t), const void* chunk_body,
       int threads)
      : chunks(chunk_count), call(chunk_call), body(chunk_body), shares(threads) {
    for (int t = 0; t < threads; ++t) {
      shares[t].next.store(chunks * t / threads, std::memory_order_relaxed);
      shares[t].end = chunks * (t + 1) / threads;
    }
  }

  // Runs the chunks left in thread `self`'s run, then those left in the others'.
  void work(size_t self) {
    for (size_t i = 0; i < shares.size(); ++i) {
      Share& share = shares[(self + i) % shares.size()];
      for (int64_t c; (c = share.next.fetch_add(1, std::memory_order_relaxed)) < share.end;) {
        run(c);
      }
    }
  }

  void run(int64_t chunk) {
    try {
      call(body, chunk);
    } catch (...) {
      std::lock_guard lock(mutex);
      if (!error) error = std::current_exception();
    }
    if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      { std::lock_guard lock(mutex); }
      finished.notify_all();
    }
  }

  // Returns once every chunk is done.
  void wait_done() {
    const auto unfinished = [&] { return done.load(std::memory_order_acquire) < chunks; };
    spin_while(unfinished);
    std::unique_lock lock(mutex);
    finished.wait(lock, [&] { return !unfinished(); });
  }
};

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { serve(i + 1); });
  }
  ~Pool() {
    stop_.store(true);
    publish();
    for (auto& thread : threads_) thread.join();
  }
  size_t workers() const { return threads_.size(); }

  // Runs `loop` on the workers and the calling thread; returns when every chunk is done.
  void run(const std::shared_ptr<Loop>& loop) {
    current_.store(loop, std::memory_order_release);
    publish();
    loop->work(0);
    loop->wait_done();
    // A worker that wakes late finds no chunk left; it only keeps `loop` alive until then.
    current_.store(nullptr, std::memory_order_release);
  }

 private:
  // Tells the workers that current_ (or stop_) changed.
  void publish() {
    {
      std::lock_guard lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    changed_.notify_all();
  }

  // The pool thread that owns the `self`-th run of every loop's chunks.
  void serve(size_t self) {
    in_loop = true;
    uint64_t seen = 0;  // not the current value: a worker may start after the first publish()
    const auto unchanged = [&] { return generation_.load(std::memory_order_acquire) == seen; };
    for (;;) {
      spin_while(unchanged);
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !unchanged(); });
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load()) return;
      if (const std::shared_ptr<Loop> loop = current_.load(std::memory_order_acquire)) {
        loop->work(self);
      }
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;  // orders publish() with a worker going to sleep
  std::condition_variable changed_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::shared_ptr<Loop>> current_;
};

// The process's pool, sized to num_threads() − 1 workers when a loop needs it; one loop at a
// time (other callers run theirs inline).
struct PoolHolder {
  std::mutex mutex;
  std::unique_ptr<Pool> pool;
};

PoolHolder& holder() {
  static PoolHolder h;
  return h;
}

}  // namespace

int num_threads() {
  const int set = configured_threads.load(std::memory_order_relaxed);
  if (set > 0) return set;
  static const int fallback = default_threads();
  return fallback;
}

void set_num_threads(int threads) {
  configured_threads.store(std::max(1, threads), std::memory_order_relaxed);
}

namespace detail {

int64_t chunk_count(int64_t n, int64_t grain) {
  const int threads = num_threads();
  if (threads <= 1 || in_loop || n < 2 * std::max<int64_t>(grain, 1)) return 1;
  return std::min(n / std::max<int64_t>(grain, 1), threads * kChunksPerThread);
}

void parallel_run(int64_t chunks, void (*call)(const void* body, int64_t chunk), const void* body) {
  PoolHolder& h = holder();
  std::unique_lock lock(h.mutex, std::try_to_lock);
  if (lock.owns_lock()) {
    const auto workers = static_cast<size_t>(num_threads() - 1);
    if (!h.pool || h.pool->workers() != workers) {
      h.pool.reset();
      h.pool = std::make_unique<Pool>(static_cast<int>(workers));
    }
  }
  const int threads = lock.owns_lock() ? static_cast<int>(h.pool->workers()) + 1 : 1;
  auto loop = std::make_shared<Loop>(chunks, call, body, threads);
  in_loop = true;
  if (lock.owns_lock()) {
    h.pool->run(loop);
  } else {
    loop->work(0);
  }
  in_loop = false;
  if (loop->error) std::rethrow_exception(loop->error);
}

}  // namespace detail
}  // namespace piper::engine::cpu
