// Rendezvous: the launcher's environment (torchrun, Slurm, Open MPI), %r in paths,
// rendezvous URLs, and ranks as threads meeting over tcp:// and file://: all meet and
// communicate; a missing rank, a duplicated rank and mismatched plan ids are named;
// diagnose() tells a failed rank from one that stopped beating.
#include "engine/comm/rendezvous.h"

#include <gmock/gmock.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "engine/comm/launch_environment.h"
#include "engine/comm/socket.h"
#include "engine/comm/tcp_store.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string ErrorOf(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

EnvironmentLookup Env(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    const auto found = values.find(name);
    return found == values.end() ? nullptr : found->second.c_str();
  };
}

TEST(LaunchEnvironment, ReadsTorchrunSlurmAndOpenMpi) {
  LaunchEnvironment torchrun = read_launch_environment("", Env({{"RANK", "3"},
                                                                {"WORLD_SIZE", "4"},
                                                                {"MASTER_ADDR", "node1"},
                                                                {"MASTER_PORT", "29500"},
                                                                {"SLURM_PROCID", "0"}}));
  EXPECT_EQ(torchrun.rank, 3);
  EXPECT_EQ(torchrun.rank_from, "RANK");
  EXPECT_EQ(torchrun.world_size, 4);
  EXPECT_EQ(torchrun.rendezvous, "tcp://node1:29500");
  EXPECT_EQ(torchrun.rendezvous_from, "MASTER_ADDR/MASTER_PORT");

  LaunchEnvironment slurm =
      read_launch_environment("", Env({{"SLURM_PROCID", "1"},
                                       {"SLURM_NTASKS", "2"},
                                       {"PIPER_RENDEZVOUS", "file:///shared/run"},
                                       {"MASTER_ADDR", "ignored"},
                                       {"MASTER_PORT", "1"}}));
  EXPECT_EQ(slurm.rank, 1);
  EXPECT_EQ(slurm.rank_from, "SLURM_PROCID");
  EXPECT_EQ(slurm.world_size, 2);
  EXPECT_EQ(slurm.world_size_from, "SLURM_NTASKS");
  EXPECT_EQ(slurm.rendezvous, "file:///shared/run");

  // mpirun inside a Slurm allocation: Open MPI's own numbering wins.
  LaunchEnvironment mpi =
      read_launch_environment("tcp://10.0.0.1:4000", Env({{"OMPI_COMM_WORLD_RANK", "5"},
                                                          {"OMPI_COMM_WORLD_SIZE", "8"},
                                                          {"SLURM_PROCID", "0"},
                                                          {"PIPER_RENDEZVOUS", "file:///x"}}));
  EXPECT_EQ(mpi.rank, 5);
  EXPECT_EQ(mpi.world_size, 8);
  EXPECT_EQ(mpi.rendezvous, "tcp://10.0.0.1:4000");
  EXPECT_EQ(mpi.rendezvous_from, "--rendezvous");

  const LaunchEnvironment none = read_launch_environment("", Env({}));
  EXPECT_FALSE(none.rank || none.world_size || none.rendezvous);
}

// torchrun's agent holds MASTER_PORT with its own c10d store: Piper's listens on the next port.
TEST(LaunchEnvironment, TorchrunsStoreKeepsMasterPortPipersTakesTheNext) {
  const LaunchEnvironment torchrun =
      read_launch_environment("", Env({{"TORCHELASTIC_RUN_ID", "job7"},
                                       {"RANK", "1"},
                                       {"WORLD_SIZE", "2"},
                                       {"MASTER_ADDR", "node1"},
                                       {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(torchrun.rendezvous, "tcp://node1:29501");
  EXPECT_EQ(torchrun.rendezvous_from, kTorchrunRendezvous);
  // An explicit rendezvous is taken as it is.
  EXPECT_EQ(read_launch_environment("tcp://node2:4000", Env({{"TORCHELASTIC_RUN_ID", "job7"},
                                                             {"MASTER_ADDR", "node1"},
                                                             {"MASTER_PORT", "29500"}}))
                .rendezvous,
            "tcp://node2:4000");
  for (const char* port : {"65535", "0", "29x", "-1"}) {
    EXPECT_THAT(ErrorOf([port] {
                  read_launch_environment("", Env({{"TORCHELASTIC_RUN_ID", "job7"},
                                                   {"MASTER_ADDR", "node1"},
                                                   {"MASTER_PORT", port}}));
                }),
                AllOf(HasSubstr("MASTER_PORT='" + std::string(port) + "' under torchrun"),
                      HasSubstr("MASTER_PORT + 1")))
        << port;
  }
}

TEST(LaunchEnvironment, RejectsJunkAndHalfAnAddress) {
  EXPECT_THAT(ErrorOf([] {
                read_launch_environment("", Env({{"RANK", "one"}}));
              }),
              HasSubstr("RANK='one' is not a non-negative integer"));
  EXPECT_THAT(ErrorOf([] {
                read_launch_environment("", Env({{"SLURM_NTASKS", "-2"}}));
              }),
              HasSubstr("SLURM_NTASKS='-2'"));
  EXPECT_THAT(ErrorOf([] {
                read_launch_environment("", Env({{"MASTER_ADDR", "node1"}}));
              }),
              HasSubstr("MASTER_ADDR is set but MASTER_PORT is not"));
}

TEST(LaunchEnvironment, RankPatternsAndPlanChecks) {
  EXPECT_TRUE(has_rank_pattern("plans/rank%r.plan"));
  EXPECT_FALSE(has_rank_pattern("plans/100%%real.plan"));
  EXPECT_EQ(expand_rank("plans/rank%r.plan", 12), "plans/rank12.plan");
  EXPECT_EQ(expand_rank("m-%r-%%r.json", 3), "m-3-%r.json");

  LaunchEnvironment launch;
  launch.rank = 1;
  launch.rank_from = "SLURM_PROCID";
  launch.world_size = 4;
  launch.world_size_from = "SLURM_NTASKS";
  EXPECT_NO_THROW(check_launch_against_plan(launch, 1, 4, "p/rank1.plan"));
  EXPECT_THAT(ErrorOf([&] { check_launch_against_plan(launch, 0, 4, "p/rank0.plan"); }),
              HasSubstr("the launcher says this is rank 1 (SLURM_PROCID) but p/rank0.plan is "
                        "rank 0 of 4"));
  EXPECT_THAT(ErrorOf([&] { check_launch_against_plan(launch, 1, 2, "p/rank1.plan"); }),
              HasSubstr("the launcher started 4 ranks (SLURM_NTASKS) but p/rank1.plan is rank 1 "
                        "of 2"));
}

TEST(LaunchEnvironment, RendezvousUrls) {
  const RendezvousUrl tcp = parse_rendezvous_url("tcp://node1:29500", "--rendezvous");
  EXPECT_EQ(tcp.kind, RendezvousUrl::Kind::kTcp);
  EXPECT_EQ(tcp.host, "node1");
  EXPECT_EQ(tcp.port, 29500);
  const RendezvousUrl file = parse_rendezvous_url("file:///shared/run1", "PIPER_RENDEZVOUS");
  EXPECT_EQ(file.kind, RendezvousUrl::Kind::kFile);
  EXPECT_EQ(file.path, "/shared/run1");
  EXPECT_THAT(ErrorOf([] { parse_rendezvous_url("http://x:1", "PIPER_RENDEZVOUS"); }),
              HasSubstr("rendezvous 'http://x:1' (PIPER_RENDEZVOUS) is neither tcp://HOST:PORT "
                        "nor file:///shared/dir"));
  EXPECT_THAT(ErrorOf([] { parse_rendezvous_url("file://relative", "--rendezvous"); }),
              HasSubstr("needs an absolute directory"));
  EXPECT_THAT(ErrorOf([] { parse_rendezvous_url("tcp://node1:0", "--rendezvous"); }),
              HasSubstr("needs a port other than 0"));
}

std::string FreePortUrl() {
  net::Socket probe = net::listen_on("127.0.0.1", 0);
  return "tcp://127.0.0.1:" + std::to_string(net::local_port(probe));
}

RendezvousOptions Meeting(const std::string& url, int rank, int world_size,
                          const std::string& plan_id = "plan-A",
                          std::chrono::milliseconds timeout = 10s) {
  RendezvousOptions options;
  options.url = url;
  options.url_from = "--rendezvous";
  options.rank = rank;
  options.world_size = world_size;
  options.plan_id = plan_id;
  options.plan_path = "plans/rank" + std::to_string(rank) + ".plan";
  options.timeout = timeout;
  options.heartbeat_period = 50ms;
  options.diagnose_window = 400ms;
  options.linger = 1s;
  return options;
}

// Runs body(rank, rendezvous) for each rank's options on its own thread; returns the errors.
std::vector<std::string> Meet(const std::vector<RendezvousOptions>& ranks,
                              const std::function<void(int, Rendezvous&)>& body) {
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        Rendezvous rendezvous(ranks[i]);
        body(static_cast<int>(i), rendezvous);
      } catch (const std::exception& error) {
        errors[i] = error.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

void ReduceOnce(int rank, Rendezvous& rendezvous, int world_size) {
  std::vector<int> all;
  for (int r = 0; r < world_size; ++r) all.push_back(r);
  auto communicator = rendezvous.communicators().connect("group 0", all);
  float value = static_cast<float>(rank + 1);
  communicator->all_reduce(&value, 1, false);
  EXPECT_EQ(value, world_size * (world_size + 1) / 2.0f);
}

TEST(Rendezvous, RanksMeetOverTcpAndCommunicate) {
  const std::string url = FreePortUrl();
  std::vector<RendezvousOptions> ranks;
  for (int rank : {2, 0, 1}) ranks.push_back(Meeting(url, rank, 3));  // any start order
  const auto errors = Meet(ranks, [&](int i, Rendezvous& rendezvous) {
    ReduceOnce(ranks[static_cast<size_t>(i)].rank, rendezvous, 3);
  });
  EXPECT_EQ(errors, std::vector<std::string>(3, ""));
}

TEST(Rendezvous, RanksMeetInASharedDirectory) {
  const std::string dir = ::testing::TempDir() + "/piper_rendezvous_file_test";
  std::filesystem::remove_all(dir);
  const std::string url = "file://" + dir;
  const std::vector<RendezvousOptions> ranks = {Meeting(url, 0, 2), Meeting(url, 1, 2)};
  EXPECT_EQ(Meet(ranks, [&](int rank, Rendezvous& rendezvous) { ReduceOnce(rank, rendezvous, 2); }),
            std::vector<std::string>(2, ""));
  // The same directory again: the earlier run's keys are there.
  const auto again = Meet({Meeting(url, 0, 1)}, [](int, Rendezvous&) {});
  EXPECT_THAT(again[0], AllOf(HasSubstr("rank 0 registered twice at file://" + dir),
                              HasSubstr("use an empty directory per run")));
  std::filesystem::remove_all(dir);
}

TEST(Rendezvous, AMissingRankIsNamed) {
  const std::string url = FreePortUrl();
  const auto errors =
      Meet({Meeting(url, 0, 4, "plan-A", 500ms), Meeting(url, 2, 4, "plan-A", 500ms)},
           [](int, Rendezvous&) {});
  for (const std::string& error : errors) {
    EXPECT_THAT(error, AllOf(HasSubstr("at " + url + " (--rendezvous) for ranks 1,3 of 4"),
                             HasSubstr("did not start")));
  }
  EXPECT_THAT(errors[1], HasSubstr("rank 2 waited 0.5"));
}

TEST(Rendezvous, ARankStartedTwiceIsRefused) {
  const std::string url = FreePortUrl();
  // The ranks that meet stay a while, so the store is there when the second rank 1 comes.
  const auto errors = Meet({Meeting(url, 0, 2, "plan-A", 1s), Meeting(url, 1, 2, "plan-A", 1s),
                            Meeting(url, 1, 2, "plan-A", 1s)},
                           [](int, Rendezvous&) { std::this_thread::sleep_for(1500ms); });
  EXPECT_EQ(errors[0], "");
  EXPECT_THAT(errors[1] + errors[2],
              AllOf(HasSubstr("rank 1 registered twice at " + url + " (first as pid " +
                              std::to_string(::getpid()) + " on "),
                    HasSubstr(", plan plans/rank1.plan): two processes were started as rank 1")));
}

// Issue 14, point 4: with a token, a client without it cannot take rank 1's place first.
TEST(Rendezvous, ASquatterWithoutTheTokenCannotTakeARank) {
  const std::string url = FreePortUrl();
  std::vector<RendezvousOptions> ranks = {Meeting(url, 0, 2, "plan-A", 30s),
                                          Meeting(url, 1, 2, "plan-A", 30s)};
  for (RendezvousOptions& rank : ranks) rank.token = "job-secret";
  std::vector<std::string> errors(2);
  auto start = [&](int rank) {
    return std::thread([&, rank] {
      errors[static_cast<size_t>(rank)] = ErrorOf([&] {
        Rendezvous rendezvous(ranks[static_cast<size_t>(rank)]);
        ReduceOnce(rank, rendezvous, 2);
      });
    });
  };
  std::thread rank0 = start(0);  // hosts the store and waits for rank 1
  // Before rank 1 comes, the squatter tries to register as rank 1 (retrying until rank 0
  // listens).
  const std::string squatter = ErrorOf([&] {
    TcpStore store("127.0.0.1", parse_rendezvous_url(url, "test").port, 30s, {"", 1});
    store.create("piper/rank/1", {});
  });
  std::thread rank1 = start(1);
  rank0.join();
  rank1.join();
  EXPECT_THAT(squatter, HasSubstr("the rendezvous token does not match"));
  EXPECT_EQ(errors, std::vector<std::string>(2, ""));
}

TEST(Rendezvous, RanksReportedNotRespondingAreReadBack) {
  const std::string message = "rank 0 waited 5 s in all_reduce #3: " + not_responding_text(12, 1s) +
                              "; " + not_responding_text(3, 1s) +
                              "; rank 4 failed: out of memory; " + not_responding_text(12, 1s);
  EXPECT_EQ(ranks_reported_not_responding(message), (std::vector<int>{12, 3}));
  EXPECT_TRUE(ranks_reported_not_responding("rank 1 failed: x").empty());
}

TEST(LaunchEnvironment, AnOpenStoreOnAReachableAddressIsWarnedOf) {
  EXPECT_EQ(read_launch_environment("", Env({{"PIPER_RENDEZVOUS_TOKEN", "s"}})).token, "s");
  auto warning = [](const std::string& url, const std::string& token) {
    return open_rendezvous_warning(parse_rendezvous_url(url, "--rendezvous"), token);
  };
  EXPECT_THAT(warning("tcp://0.0.0.0:29500", ""),
              AllOf(HasSubstr("listens on 0.0.0.0:29500 without a token: any host that reaches "
                              "the port can join"),
                    HasSubstr("export PIPER_RENDEZVOUS_TOKEN=$(openssl rand -hex 32)")));
  EXPECT_NE(warning("tcp://node1:29500", ""), "");
  EXPECT_NE(warning("tcp://10.1.2.3:29500", ""), "");
  EXPECT_EQ(warning("tcp://10.1.2.3:29500", "secret"), "");
  for (const char* local : {"tcp://127.0.0.1:1", "tcp://127.0.0.2:1", "tcp://[::1]:1",
                            "tcp://localhost:1", "file:///shared/run"}) {
    EXPECT_EQ(warning(local, ""), "") << local;
  }
}

TEST(Rendezvous, PlansOfDifferentRunsRefuseToStart) {
  const std::string url = FreePortUrl();
  const auto errors =
      Meet({Meeting(url, 0, 2, "aaaa"), Meeting(url, 1, 2, "bbbb")}, [](int, Rendezvous&) {});
  EXPECT_THAT(errors[0], HasSubstr("refusing to start: the ranks' plans come from different "
                                   "planning runs: rank 0 (this rank, plans/rank0.plan) has plan "
                                   "id 'aaaa' but rank 1 (plans/rank1.plan) has plan id 'bbbb'"));
  EXPECT_THAT(errors[1], HasSubstr("rank 0 (plans/rank0.plan) has plan id 'aaaa' but rank 1 "
                                   "(this rank, plans/rank1.plan) has plan id 'bbbb'"));
}

// Rank 1 reports a failure, rank 2 stops beating (its rendezvous is gone), rank 3 is fine.
TEST(Rendezvous, DiagnoseTellsFailedFromSilentFromAlive) {
  const std::string url = FreePortUrl();
  std::vector<RendezvousOptions> ranks;
  for (int rank = 0; rank < 4; ++rank) ranks.push_back(Meeting(url, rank, 4));
  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  std::string diagnosis;
  const auto errors = Meet(ranks, [&](int rank, Rendezvous& rendezvous) {
    if (rank == 1) rendezvous.report_failure("out of memory");
    ++ready;
    while (ready < 4) std::this_thread::sleep_for(5ms);
    if (rank == 2) return;  // leaves: no more heartbeats
    if (rank == 0) {
      std::this_thread::sleep_for(200ms);
      diagnosis = rendezvous.diagnose({1, 2, 3});
      done = true;
    }
    while (!done) std::this_thread::sleep_for(5ms);
  });
  EXPECT_EQ(errors, std::vector<std::string>(4, ""));
  EXPECT_THAT(diagnosis, HasSubstr("rank 1 failed: out of memory"));
  EXPECT_THAT(diagnosis, HasSubstr("rank 2 is not responding (no heartbeat for 0.4 s"));
  EXPECT_EQ(ranks_reported_not_responding(diagnosis), std::vector<int>{2});
  EXPECT_THAT(diagnosis, ::testing::Not(HasSubstr("rank 3")));
}

}  // namespace
}  // namespace piper::engine
