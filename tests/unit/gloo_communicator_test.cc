// GlooCommunicator: N ranks as threads meeting through gloo's in-memory HashStore,
// talking over real TCP on localhost. Every collective against its closed form for
// 2 and 4 ranks (counts that do not divide evenly, aliasing; bfloat16 sums rounded to
// nearest even), send/recv, channels
// used concurrently, sub-groups, and the failures: a rank that never joins, one that
// never takes part, one that goes away, and abort().
#include "engine/comm/gloo/gloo_communicator.h"

#include <gloo/rendezvous/hash_store.h>
#include <gmock/gmock.h>
#include <sched.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <set>
#include <thread>

#include "formats/error.h"

namespace piper::engine {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

GlooOptions Options(std::chrono::milliseconds timeout = 20s) {
  GlooOptions options;
  options.timeout = timeout;
  options.hostname = "127.0.0.1";
  return options;
}

// Runs body(rank, factory) on one thread per rank over one shared store; returns each rank's
// error message ("" when it succeeded).
std::vector<std::string> RunRanks(int ranks,
                                  const std::function<void(int, CommunicatorFactory&)>& body,
                                  GlooOptions options = Options()) {
  gloo::rendezvous::HashStore store;
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        GlooCommunicatorFactory factory(store, rank, options);
        body(rank, factory);
      } catch (const std::exception& error) {
        errors[static_cast<size_t>(rank)] = error.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

std::vector<int> Iota(int count) {
  std::vector<int> values(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) values[static_cast<size_t>(i)] = i;
  return values;
}

void ExpectAllSucceeded(const std::vector<std::string>& errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
  }
}

class GlooCommunicatorTest : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
  // Runs body(rank, communicator) on every rank of a group of all n() ranks.
  void RunGroup(const std::function<void(int, Communicator&)>& body) {
    ExpectAllSucceeded(RunRanks(n(), [&](int rank, CommunicatorFactory& factory) {
      auto communicator = factory.connect("all", Iota(n()));
      EXPECT_EQ(communicator->rank(), rank);
      EXPECT_EQ(communicator->size(), n());
      body(rank, *communicator);
    }));
  }
};

TEST_P(GlooCommunicatorTest, AllReduceSumsAndAverages) {
  RunGroup([&](int rank, Communicator& communicator) {
    // Counts below, at and above the group size, and not a multiple of it; two members
    // exchange small buffers whole and take the ring past 1 MiB.
    for (size_t count : {size_t{1}, size_t{3}, size_t{7}, size_t{1000}, (size_t{1} << 20) + 3}) {
      for (bool average : {false, true}) {
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank) + 0.5f * i;
        communicator.all_reduce(data.data(), count, average);
        for (size_t i = 0; i < count; ++i) {
          const double sum = n() * (n() - 1) / 2.0 + n() * 0.5 * i;
          ASSERT_FLOAT_EQ(data[i], average ? sum / n() : sum)
              << "rank " << rank << " count " << count << " element " << i;
        }
      }
    }
    communicator.all_reduce(nullptr, 0, false);  // nothing to do, on every rank alike
  });
}

TEST_P(GlooCommunicatorTest, ReduceScatterGivesEachMemberItsSliceOfTheSum) {
  RunGroup([&](int rank, Communicator& communicator) {
    for (size_t k : {size_t{1}, size_t{5}}) {
      std::vector<float> in(n() * k);
      for (size_t j = 0; j < in.size(); ++j) in[j] = 1000.0f * rank + static_cast<float>(j);
      std::vector<float> out(k, -1.0f);
      communicator.reduce_scatter(in.data(), out.data(), k, false);
      for (size_t i = 0; i < k; ++i) {
        ASSERT_FLOAT_EQ(out[i], 1000.0 * n() * (n() - 1) / 2 + n() * (rank * k + i))
            << "rank " << rank << " k " << k << " element " << i;
      }
      // Averaged, with the output inside the input (this member's own slice).
      for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<float>(rank + j);
      float* own = in.data() + rank * k;
      communicator.reduce_scatter(in.data(), own, k, true);
      for (size_t i = 0; i < k; ++i) {
        ASSERT_FLOAT_EQ(own[i], (n() - 1) / 2.0 + (rank * k + i)) << "rank " << rank;
      }
    }
  });
}

TEST_P(GlooCommunicatorTest, AllGatherConcatenatesInGroupOrder) {
  RunGroup([&](int rank, Communicator& communicator) {
    const size_t k = 3;
    std::vector<float> in(k);
    for (size_t i = 0; i < k; ++i) in[i] = 100.0f * rank + i;
    std::vector<float> out(n() * k, -1.0f);
    communicator.all_gather(in.data(), out.data(), k);
    for (int member = 0; member < n(); ++member) {
      for (size_t i = 0; i < k; ++i) ASSERT_FLOAT_EQ(out[member * k + i], 100.0f * member + i);
    }
    // In place: the input is this member's slice of the output.
    std::vector<float> inplace(n() * k, -1.0f);
    for (size_t i = 0; i < k; ++i) inplace[rank * k + i] = 7.0f * rank + i;
    communicator.all_gather(inplace.data() + rank * k, inplace.data(), k);
    for (int member = 0; member < n(); ++member) {
      for (size_t i = 0; i < k; ++i) ASSERT_FLOAT_EQ(inplace[member * k + i], 7.0f * member + i);
    }
  });
}

TEST_P(GlooCommunicatorTest, BroadcastCopiesTheRootsBytes) {
  RunGroup([&](int rank, Communicator& communicator) {
    const int root = n() - 1;
    std::vector<uint8_t> data(13);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(rank * 16 + i);
    communicator.broadcast(data.data(), data.size(), root);
    for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], root * 16 + i) << "rank " << rank;
  });
}

TEST_P(GlooCommunicatorTest, AllToAllTransposesSlices) {
  RunGroup([&](int rank, Communicator& communicator) {
    const size_t per = 3;  // int32 values per member
    auto value = [](int from, int to, size_t i) {
      return from * 100 + to * 10 + static_cast<int>(i);
    };
    std::vector<int32_t> in(n() * per), out(n() * per, -1);
    for (int to = 0; to < n(); ++to) {
      for (size_t i = 0; i < per; ++i) in[to * per + i] = value(rank, to, i);
    }
    communicator.all_to_all(in.data(), out.data(), per * sizeof(int32_t));
    for (int from = 0; from < n(); ++from) {
      for (size_t i = 0; i < per; ++i) ASSERT_EQ(out[from * per + i], value(from, rank, i));
    }
    communicator.all_to_all(in.data(), in.data(), per * sizeof(int32_t));  // in place
    EXPECT_EQ(in, out);
  });
}

TEST_P(GlooCommunicatorTest, AllToAllVMovesPiecesOfEverySize) {
  RunGroup([&](int rank, Communicator& communicator) {
    // Member `from` sends (from + to) % 3 values to member `to` (some pieces empty).
    auto size = [](int from, int to) { return static_cast<size_t>((from + to) % 3); };
    auto value = [](int from, int to, size_t i) {
      return from * 100 + to * 10 + static_cast<int>(i);
    };
    std::vector<std::vector<int32_t>> in(static_cast<size_t>(n())), out(in.size());
    std::vector<const void*> send;
    std::vector<void*> recv;
    std::vector<size_t> send_bytes, recv_bytes;
    for (int peer = 0; peer < n(); ++peer) {
      auto& piece = in[static_cast<size_t>(peer)];
      for (size_t i = 0; i < size(rank, peer); ++i) piece.push_back(value(rank, peer, i));
      out[static_cast<size_t>(peer)].assign(size(peer, rank), -1);
      send.push_back(piece.data());
      send_bytes.push_back(piece.size() * sizeof(int32_t));
      recv.push_back(out[static_cast<size_t>(peer)].data());
      recv_bytes.push_back(size(peer, rank) * sizeof(int32_t));
    }
    communicator.all_to_all_v(send, send_bytes, recv, recv_bytes);
    for (int from = 0; from < n(); ++from) {
      for (size_t i = 0; i < size(from, rank); ++i) {
        ASSERT_EQ(out[static_cast<size_t>(from)][i], value(from, rank, i)) << "rank " << rank;
      }
    }
  });
}

TEST_P(GlooCommunicatorTest, SendAndRecvAroundTheRingByTag) {
  RunGroup([&](int rank, Communicator& communicator) {
    const int right = (rank + 1) % n(), left = (rank + n() - 1) % n();
    std::vector<double> mine = {rank * 1.5, rank * 2.5}, theirs(2, 0.0);
    // Even ranks send first, odd ranks receive first: blocking transfers need a partner.
    for (int turn = 0; turn < 2; ++turn) {
      if ((rank % 2 == 0) == (turn == 0)) {
        communicator.send(mine.data(), sizeof(double) * 2, right, 40 + rank);
      } else {
        communicator.recv(theirs.data(), sizeof(double) * 2, left, 40 + left);
      }
    }
    EXPECT_EQ(theirs, (std::vector<double>{left * 1.5, left * 2.5})) << "rank " << rank;
  });
}

// Two streams of each rank reduce on their own channels at the same time.
TEST_P(GlooCommunicatorTest, ChannelsRunConcurrently) {
  RunGroup([&](int rank, Communicator& communicator) {
    auto a = communicator.channel("dp_reduce");
    auto b = communicator.channel("dp_gather");
    std::string failure;
    std::thread other([&] {
      try {
        for (int round = 0; round < 20; ++round) {
          std::vector<float> data(64, static_cast<float>(rank + round));
          b->all_reduce(data.data(), data.size(), false);
          if (data[63] != n() * (n() - 1) / 2.0f + n() * round)
            failure = "channel b round " + std::to_string(round);
        }
      } catch (const std::exception& error) {
        failure = error.what();
      }
    });
    for (int round = 0; round < 20; ++round) {
      std::vector<float> data(17, 10.0f * rank);
      a->all_reduce(data.data(), data.size(), true);
      ASSERT_FLOAT_EQ(data[16], 10.0f * (n() - 1) / 2.0f);
    }
    other.join();
    EXPECT_EQ(failure, "") << "rank " << rank;
  });
}

// bfloat16 bits of `x` rounded to nearest even, in double arithmetic (independent of the
// engine's conversion); x is finite and within bfloat16's normal range.
uint16_t ToBf16(double x) {
  if (x == 0.0) return 0;
  const double ulp = std::ldexp(1.0, std::ilogb(x) - 7);  // 8 significant bits
  const auto value = static_cast<float>(std::nearbyint(x / ulp) * ulp);
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  return static_cast<uint16_t>(word >> 16);
}

double FromBf16(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

// Sums of values whose partial sums are all exact in bfloat16 are the same in any order.
TEST_P(GlooCommunicatorTest, BFloat16SumsOfExactValuesAreExact) {
  RunGroup([&](int rank, Communicator& communicator) {
    auto value = [](int member, size_t i) { return member + 0.5 * static_cast<double>(i % 8); };
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
      for (bool average : {false, true}) {
        std::vector<uint16_t> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = ToBf16(value(rank, i));
        communicator.all_reduce(data.data(), count, ElementType::kBFloat16, average);
        for (size_t i = 0; i < count; ++i) {
          double sum = 0;
          for (int member = 0; member < n(); ++member) sum += value(member, i);
          ASSERT_EQ(FromBf16(data[i]), average ? sum / n() : sum)
              << "rank " << rank << " count " << count << " element " << i;
        }
      }
    }
    const size_t k = 5;
    std::vector<uint16_t> in(n() * k), out(k);
    for (size_t j = 0; j < in.size(); ++j) in[j] = ToBf16(value(rank, j));
    communicator.reduce_scatter(in.data(), out.data(), k, ElementType::kBFloat16, false);
    for (size_t i = 0; i < k; ++i) {
      double sum = 0;
      for (int member = 0; member < n(); ++member) sum += value(member, rank * k + i);
      ASSERT_EQ(FromBf16(out[i]), sum) << "rank " << rank << " element " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooCommunicatorTest, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Two members' bfloat16 sums: added in float32 (exact for these magnitudes) and rounded to
// nearest even, averages rounded again after the division; gathers keep every bit.
TEST(GlooCommunicator, BFloat16SumsRoundToNearestEvenAndGathersKeepTheBits) {
  auto value = [](int member, size_t i) {  // bfloat16 values of either sign in [0.5, 4)
    uint32_t state = static_cast<uint32_t>(member * 7919 + i * 104729 + 1);
    state = state * 1664525u + 1013904223u;
    const double magnitude = 0.5 + 3.5 * ((state >> 8) * (1.0 / 16777216.0));
    return FromBf16(ToBf16((state & 1) ? -magnitude : magnitude));
  };
  ExpectAllSucceeded(RunRanks(2, [&](int rank, CommunicatorFactory& factory) {
    auto communicator = factory.connect("pair", {0, 1});
    const size_t count = 1001;
    for (bool average : {false, true}) {
      std::vector<uint16_t> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = ToBf16(value(rank, i));
      communicator->all_reduce(data.data(), count, ElementType::kBFloat16, average);
      for (size_t i = 0; i < count; ++i) {
        const uint16_t sum = ToBf16(value(0, i) + value(1, i));
        ASSERT_EQ(data[i], average ? ToBf16(FromBf16(sum) / 2) : sum)
            << "rank " << rank << " element " << i << (average ? " (average)" : "");
      }
    }
    // Ties go to the even neighbour: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6, 257 -> 256,
    // 259 -> 260.
    const std::vector<double> mine = rank == 0 ? std::vector<double>{1, 1, 256, 256}
                                               : std::vector<double>{0.00390625, 0.01171875, 1, 3};
    std::vector<uint16_t> ties;
    for (double x : mine) ties.push_back(ToBf16(x));
    std::vector<uint16_t> scattered(2);
    communicator->reduce_scatter(ties.data(), scattered.data(), 2, ElementType::kBFloat16, false);
    const std::vector<double> sums = {1, 1.015625, 256, 260};
    EXPECT_EQ(FromBf16(scattered[0]), sums[2 * rank]) << "rank " << rank;
    EXPECT_EQ(FromBf16(scattered[1]), sums[2 * rank + 1]) << "rank " << rank;
    communicator->all_reduce(ties.data(), ties.size(), ElementType::kBFloat16, false);
    for (size_t i = 0; i < sums.size(); ++i) EXPECT_EQ(FromBf16(ties[i]), sums[i]) << i;
    // Three elements (six bytes) each, NaN payloads and negative zero kept.
    const std::vector<uint16_t> shard = rank == 0 ? std::vector<uint16_t>{0x7fc1, 0x8000, 0x3f80}
                                                  : std::vector<uint16_t>{0x0001, 0xff81, 0x4049};
    std::vector<uint16_t> gathered(6, 0xdead);
    communicator->all_gather(shard.data(), gathered.data(), 3, ElementType::kBFloat16);
    EXPECT_EQ(gathered, (std::vector<uint16_t>{0x7fc1, 0x8000, 0x3f80, 0x0001, 0xff81, 0x4049}));
  }));
}

// Four ranks in groups {0,1}, {2,3} and {3,1} (listed out of order: rank 3 is member 0).
TEST(GlooCommunicator, SubGroupsReduceAmongTheirMembers) {
  const std::vector<std::vector<int>> groups = {{0, 1}, {2, 3}, {3, 1}};
  ExpectAllSucceeded(RunRanks(4, [&](int rank, CommunicatorFactory& factory) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& members = groups[g];
      if (std::find(members.begin(), members.end(), rank) == members.end()) continue;
      auto communicator = factory.connect("group " + std::to_string(g), members);
      const int index =
          static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
      EXPECT_EQ(communicator->rank(), index);
      float value = static_cast<float>(1 << rank);
      communicator->all_reduce(&value, 1, false);
      EXPECT_EQ(value, static_cast<float>((1 << members[0]) + (1 << members[1])))
          << "group " << g << " rank " << rank;
      std::vector<float> gathered(2);
      const float mine = static_cast<float>(rank);
      communicator->all_gather(&mine, gathered.data(), 1);
      EXPECT_EQ(gathered, (std::vector<float>{static_cast<float>(members[0]),
                                              static_cast<float>(members[1])}));
    }
  }));
}

TEST(GlooCommunicator, ARankThatNeverJoinsIsNamed) {
  const auto errors = RunRanks(
      3,
      [&](int rank, CommunicatorFactory& factory) {
        if (rank == 2) return;  // never connects
        factory.connect("group 7", {0, 1, 2});
      },
      Options(500ms));
  for (int rank : {0, 1}) {
    EXPECT_THAT(errors[rank], AllOf(HasSubstr("rank " + std::to_string(rank) + " waited"),
                                    HasSubstr("to connect group 7 (ranks 0,1,2)"),
                                    HasSubstr("rank 2 did not join")));
  }
}

TEST(GlooCommunicator, ARankThatNeverTakesPartTimesOutNamingCollectiveGroupAndPeer) {
  GlooOptions options = Options(700ms);
  options.diagnose = [](const std::vector<int>& ranks) {
    return "diagnosis of " + std::to_string(ranks.size()) + " rank(s)";
  };
  std::atomic<bool> done{false};
  const auto start = std::chrono::steady_clock::now();
  const auto errors = RunRanks(
      2,
      [&](int rank, CommunicatorFactory& factory) {
        auto communicator = factory.connect("group 0", {0, 1});
        if (rank == 1) {  // stays connected but never reduces
          while (!done) std::this_thread::sleep_for(10ms);
          return;
        }
        auto channel = communicator->channel("dp_reduce");
        float value = 1;
        try {
          channel->all_reduce(&value, 1, false);
        } catch (...) {
          done = true;
          throw;
        }
        done = true;
      },
      options);
  EXPECT_THAT(errors[0], AllOf(HasSubstr("rank 0 waited 0.7"),
                               HasSubstr("in all_reduce #1 on channel 'dp_reduce' of group 0 "
                                         "(ranks 0,1) for data from rank 1"),
                               HasSubstr("; diagnosis of 1 rank(s)")));
  EXPECT_EQ(errors[1], "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(GlooCommunicator, APeerThatGoesAwayFailsTheOthersPromptly) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = RunRanks(2, [&](int rank, CommunicatorFactory& factory) {
    auto communicator = factory.connect("group 0", {0, 1});
    if (rank == 1) {
      std::this_thread::sleep_for(200ms);
      return;  // closes its connections
    }
    std::vector<float> data(10, 1.0f);
    communicator->all_reduce(data.data(), data.size(), false);
  });
  EXPECT_THAT(errors[0], AllOf(HasSubstr("rank 0 lost rank 1 in all_reduce #1 of group 0"),
                               ::testing::Not(HasSubstr("[./gloo"))));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "the 20 s timeout must not be needed";
}

TEST(GlooCommunicator, AbortInterruptsABlockedOperation) {
  std::atomic<bool> finished{false};
  const auto errors = RunRanks(2, [&](int rank, CommunicatorFactory& factory) {
    auto communicator = factory.connect("group 0", {0, 1});
    if (rank == 1) {
      while (!finished) std::this_thread::sleep_for(10ms);
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      communicator->abort();
    });
    const auto start = std::chrono::steady_clock::now();
    float value = 0;
    std::string message;
    try {
      communicator->channel("dp")->broadcast(&value, sizeof value, 1);
    } catch (const Error& error) {
      message = error.what();
    }
    aborter.join();
    finished = true;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_THAT(message, HasSubstr("rank 0: broadcast #1 on channel 'dp' of group 0 (ranks 0,1) "
                                   "was aborted"));
    // Later operations fail at once too.
    EXPECT_THROW(communicator->all_reduce(&value, 1, false), Error);
  });
  ExpectAllSucceeded(errors);
}

// The threads of this process, by id.
std::set<pid_t> Threads() {
  std::set<pid_t> threads;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    threads.insert(static_cast<pid_t>(std::stoi(entry.path().filename().string())));
  }
  return threads;
}

// Gloo's event thread spins while a caller holds a connection's lock; as a batch thread it
// does not preempt that caller when it wakes (gloo_communicator.cc, create_device).
TEST(GlooCommunicator, TheTransportThreadIsABatchThread) {
  const std::set<pid_t> before = Threads();
  gloo::rendezvous::HashStore store;
  GlooCommunicatorFactory factory(store, 0, Options());
  auto communicator = factory.connect("alone", {0});
  std::vector<pid_t> started;
  for (pid_t thread : Threads()) {
    if (!before.count(thread)) started.push_back(thread);
  }
  ASSERT_FALSE(started.empty());
  for (pid_t thread : started) EXPECT_EQ(sched_getscheduler(thread), SCHED_BATCH) << thread;
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);  // the caller keeps its policy
}

TEST(GlooCommunicator, RefusesGroupsWithoutThisRank) {
  const auto errors = RunRanks(1, [&](int, CommunicatorFactory& factory) {
    factory.connect("group 3", {1, 2});
  });
  EXPECT_THAT(errors[0], HasSubstr("rank 0 is not a member of group 3 (ranks 1,2)"));
}

}  // namespace
}  // namespace piper::engine
