// parallel_for: every iteration once, ranges of at least the grain, nested loops inline,
// exceptions rethrown to the caller, loops from several threads at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/cpu/parallel.h"

namespace piper::engine::cpu {
namespace {

// Restores the thread count a test changed.
class ParallelTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = num_threads(); }
  void TearDown() override { set_num_threads(saved_); }

 private:
  int saved_ = 1;
};

TEST_F(ParallelTest, CoversEveryIterationOnceInRangesOfAtLeastTheGrain) {
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 7, 100, 1000, 12345}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int64_t> smallest{n};
      parallel_for(n, 10, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        int64_t s = smallest.load();
        while (end - begin < s && !smallest.compare_exchange_weak(s, end - begin)) {
        }
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
      }
      if (n > 0) {
        EXPECT_GE(smallest.load(), std::min<int64_t>(n, 10)) << "n " << n;
      }
    }
  }
}

TEST_F(ParallelTest, UsesSeveralThreadsForLargeLoops) {
  set_num_threads(4);
  std::vector<std::thread::id> ids(4000);
  parallel_for(4000, 1, [&](int64_t begin, int64_t end) {
    // Long enough per range that the workers wake before the caller has claimed every range.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int64_t i = begin; i < end; ++i) ids[i] = std::this_thread::get_id();
  });
  std::vector<std::thread::id> distinct;
  for (const auto& id : ids) {
    if (std::find(distinct.begin(), distinct.end(), id) == distinct.end()) distinct.push_back(id);
  }
  EXPECT_GT(distinct.size(), 1u);
}

TEST_F(ParallelTest, NestedLoopsRunInline) {
  set_num_threads(4);
  std::atomic<int64_t> total{0};
  parallel_for(64, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto outer = std::this_thread::get_id();
      parallel_for(100, 1, [&](int64_t b, int64_t e) {
        EXPECT_EQ(std::this_thread::get_id(), outer);
        total.fetch_add(e - b);
      });
    }
  });
  EXPECT_EQ(total.load(), 6400);
}

TEST_F(ParallelTest, RethrowsTheFirstExceptionAfterEveryRangeFinished) {
  set_num_threads(4);
  std::atomic<int64_t> ran{0};
  EXPECT_THROW(parallel_for(1000, 10,
                            [&](int64_t begin, int64_t end) {
                              ran.fetch_add(end - begin);
                              if (begin == 0) throw std::runtime_error("range 0 failed");
                            }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 1000);
  // The pool still works afterwards.
  std::atomic<int64_t> again{0};
  parallel_for(1000, 10, [&](int64_t begin, int64_t end) { again.fetch_add(end - begin); });
  EXPECT_EQ(again.load(), 1000);
}

TEST_F(ParallelTest, LoopsFromSeveralThreadsAtOnce) {
  set_num_threads(3);
  std::vector<int64_t> sums(4, 0);
  std::vector<std::thread> callers;
  for (size_t t = 0; t < sums.size(); ++t) {
    callers.emplace_back([&sums, t] {
      for (int round = 0; round < 200; ++round) {
        std::vector<int64_t> values(5000, 0);
        parallel_for(5000, 100, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) values[i] = i;
        });
        for (int64_t v : values) sums[t] += v;
      }
    });
  }
  for (auto& caller : callers) caller.join();
  for (int64_t s : sums) EXPECT_EQ(s, int64_t{200} * 4999 * 5000 / 2);
}

}  // namespace
}  // namespace piper::engine::cpu
