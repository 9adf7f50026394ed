#include "formats/plan_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>

#include "formats/error.h"
#include "formats/plan_file.h"

namespace piper::formats {
namespace {

namespace fs = std::filesystem;

class PlanDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("piper_plan_directory_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Rank r's plan names its rank and holds r + 1 tensors.
  static void plan_of(int rank, plan::Plan& plan) {
    plan.mutable_header()->set_format_version(kPlanFormatVersion);
    plan.mutable_header()->set_rank(rank);
    for (int i = 0; i <= rank; ++i) plan.add_tensors()->set_name("t" + std::to_string(i));
  }

  fs::path root_;
};

TEST_F(PlanDirectory, ThreadsWriteEveryRankOnce) {
  constexpr int kRanks = 37;
  for (int threads : {1, 4}) {
    const fs::path dir = root_ / ("threads" + std::to_string(threads));
    std::set<int> made;
    std::mutex mutex;
    write_plan_directory(
        kRanks,
        [&](int rank, plan::Plan& plan) {
          {
            const std::lock_guard<std::mutex> lock(mutex);
            EXPECT_TRUE(made.insert(rank).second) << "rank " << rank << " made twice";
          }
          // Each plan starts empty, though the arena's last plan was another rank's.
          EXPECT_EQ(plan.tensors_size(), 0);
          plan_of(rank, plan);
        },
        dir.string(), false, threads);
    EXPECT_EQ(made.size(), static_cast<size_t>(kRanks));
    const std::vector<std::string> paths = rank_plan_paths(dir.string(), "test");
    ASSERT_EQ(paths.size(), static_cast<size_t>(kRanks));
    for (int rank = 0; rank < kRanks; ++rank) {
      const plan::Plan plan = read_plan_file(paths[rank]);
      EXPECT_EQ(plan.header().rank(), static_cast<uint32_t>(rank));
      EXPECT_EQ(plan.tensors_size(), rank + 1);
    }
  }
}

TEST_F(PlanDirectory, AThreadsErrorIsRethrownAndNothingAppears) {
  const fs::path dir = root_ / "plans";
  EXPECT_THROW(write_plan_directory(
                   64,
                   [&](int rank, plan::Plan& plan) {
                     if (rank == 40) throw Error("rank 40 cannot be planned");
                     plan_of(rank, plan);
                   },
                   dir.string(), false, 3),
               Error);
  EXPECT_FALSE(fs::exists(dir));
}

}  // namespace
}  // namespace piper::formats
