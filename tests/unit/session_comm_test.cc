// Sessions of a two-rank plan, as threads talking through Gloo over localhost:
// every collective instruction (with REDUCE_SCATTER's padding, ALL_GATHER's
// truncation and a fused bucket), a group of one, send/recv between ranks; a
// rank whose kernel fails while another stream waits in a transfer stops at once,
// failing its peer promptly too; bfloat16 collectives; and tensors zeroed at the start of each
// step.
#include <gmock/gmock.h>

#include "engine/runtime/session.h"
#include "engine_test_util.h"
#include "formats/error.h"
#include "session_ranks.h"

namespace piper::engine::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr int kWorld = 2;

plan::Instruction* AddCollective(plan::Plan& plan, int stream, plan::Collective::Kind kind,
                                 int group, const std::vector<int>& inputs,
                                 const std::vector<int>& outputs, bool average = false) {
  plan::Instruction* instruction = plan.mutable_streams(stream)->add_instructions();
  plan::Collective* collective = instruction->mutable_collective();
  collective->set_kind(kind);
  collective->set_group(group);
  collective->set_average(average);
  for (int index : inputs) collective->add_inputs(index);
  for (int index : outputs) collective->add_outputs(index);
  return instruction;
}

void SetRank(plan::Plan& plan, int rank) { testing::SetRank(plan, rank, kWorld); }

std::vector<float> Floats(size_t count, float first, float step = 1.0f) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = first + step * static_cast<float>(i);
  return values;
}

std::vector<std::string> RunRanks(const std::function<void(int, CommunicatorFactory&)>& body,
                                  std::chrono::milliseconds timeout = 20s) {
  return testing::RunRanks(kWorld, body, timeout);
}

TEST(SessionComm, CollectivesAndTransfersAcrossTwoRanks) {
  PlanBuilder b;
  const int g = b.Tensor("g", {5});
  const int mean = b.Tensor("mean", {5});
  const int scatter_in = b.Tensor("scatter_in", {7});  // padded to 2 x 4
  const int scatter_out = b.Tensor("scatter_out", {4});
  const int gather_in = b.Tensor("gather_in", {4});
  const int gather_out = b.Tensor("gather_out", {7});  // the first 7 of 2 x 4
  const int b1 = b.Tensor("b1", {3});
  const int b2 = b.Tensor("b2", {2, 1});
  const int mine = b.Tensor("mine", {2});
  const int message = b.Tensor("message", {3});
  b.Kernel("comm", "Neg", {g}, {g});  // creates the stream; g := -g before the reduction
  b.Record("comm", 0);
  b.Wait("p2p", 0);
  plan::Plan base = b.Build();
  AddGroup(base, 0, {0, 1});
  AddCollective(base, 0, plan::Collective::ALL_REDUCE, 0, {g}, {mean}, true);
  AddCollective(base, 0, plan::Collective::REDUCE_SCATTER, 0, {scatter_in}, {scatter_out});
  AddCollective(base, 0, plan::Collective::ALL_GATHER, 0, {gather_in}, {gather_out});
  AddCollective(base, 0, plan::Collective::ALL_REDUCE, 0, {b1, b2}, {b1, b2});  // a bucket

  const auto errors = RunRanks([&](int rank, CommunicatorFactory& factory) {
    plan::Plan plan = base;
    SetRank(plan, rank);
    AddGroup(plan, 5 + rank, {rank});  // this rank alone: a copy
    AddCollective(plan, 0, plan::Collective::ALL_GATHER, 5 + rank, {mine}, {mine});
    plan::Instruction* transfer = plan.mutable_streams(1)->add_instructions();
    if (rank == 0) {
      transfer->mutable_send()->set_tensor(message);
      transfer->mutable_send()->set_peer(1);
      transfer->mutable_send()->set_tag(7);
    } else {
      transfer->mutable_recv()->set_tensor(message);
      transfer->mutable_recv()->set_peer(0);
      transfer->mutable_recv()->set_tag(7);
    }
    Session session(plan, std::make_unique<cpu::CpuBackend>(), {0, &factory});
    auto write = [&](const std::string& name, const std::vector<float>& values) {
      session.write_tensor(name, values.data(), values.size() * sizeof(float));
    };
    const float r = static_cast<float>(rank);
    write("g", Floats(5, -10 * r));           // -> -(10 r) - i after Neg
    write("scatter_in", Floats(7, 100 * r));  // 100 r + j
    write("gather_in", Floats(4, 10 * r));    // 10 r + i
    write("b1", Floats(3, r));
    write("b2", Floats(2, 5 * r));
    write("mine", {r, r});
    write("message", rank == 0 ? Floats(3, 42) : Floats(3, 0, 0));
    session.step({});

    // mean_i = average over ranks of (10 r - i) = 5 - i.
    ExpectNear(session.read_floats("mean"), {5, 4, 3, 2, 1}, 0, "all-reduce average");
    // Sum over ranks of (100 r + j), j in this rank's slice [4 rank, 4 rank + 4), 0 past 7.
    std::vector<double> scatter;
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * rank + i;
      scatter.push_back(j < 7 ? 100.0 + 2 * j : 0.0);
    }
    ExpectNear(session.read_floats("scatter_out"), scatter, 0, "reduce-scatter");
    ExpectNear(session.read_floats("gather_out"), {0, 1, 2, 3, 10, 11, 12}, 0, "all-gather");
    ExpectNear(session.read_floats("b1"), {1, 3, 5}, 0, "bucket b1");
    ExpectNear(session.read_floats("b2"), {5, 7}, 0, "bucket b2");
    ExpectNear(session.read_floats("mine"), {r, r}, 0, "group of one");
    ExpectNear(session.read_floats("message"), {42, 43, 44}, 0, "send/recv");
  });
  EXPECT_EQ(errors, std::vector<std::string>(kWorld, ""));
}

// The fused collectives of a stream share one buffer, the size of the largest. A bucket's
// reduce-scatter leaves its sums where the next one pads its input, and the pad is zero again.
TEST(SessionComm, FusedCollectivesOfAStreamShareOneBuffer) {
  PlanBuilder b;
  const int a = b.Tensor("a", {8});
  const int a_out = b.Tensor("a_out", {4});
  const int c = b.Tensor("c", {8});
  const int c_out = b.Tensor("c_out", {4});
  const int d = b.Tensor("d", {7});  // padded to 2 x 4
  const int d_out = b.Tensor("d_out", {4});
  plan::Plan base = b.Build();
  base.add_streams()->set_name("comm");
  AddGroup(base, 0, {0, 1});
  AddCollective(base, 0, plan::Collective::REDUCE_SCATTER, 0, {a, c}, {a_out, c_out});
  AddCollective(base, 0, plan::Collective::REDUCE_SCATTER, 0, {d}, {d_out});
  const auto errors = RunRanks([&](int rank, CommunicatorFactory& factory) {
    plan::Plan plan = base;
    SetRank(plan, rank);
    Session session(plan, std::make_unique<cpu::CpuBackend>(), {0, &factory});
    // One buffer: the bucket's 2 x 8 floats, after the pad's zeros (one float, kept 64-byte
    // aligned); not one per collective.
    EXPECT_EQ(session.fusion_bytes(), 64u + 16 * sizeof(float));
    EXPECT_EQ(session.peak_bytes(), session.plan().memory().arena_bytes() + 128);
    auto write = [&](const std::string& name, const std::vector<float>& values) {
      session.write_tensor(name, values.data(), values.size() * sizeof(float));
    };
    write("a", Floats(8, 1));
    write("c", Floats(8, 11));
    write("d", Floats(7, 100));
    session.step({});
    const float r = static_cast<float>(rank);
    ExpectNear(session.read_floats("a_out"), {2 + 8 * r, 4 + 8 * r, 6 + 8 * r, 8 + 8 * r}, 0,
               "bucket a");
    ExpectNear(session.read_floats("c_out"), {22 + 8 * r, 24 + 8 * r, 26 + 8 * r, 28 + 8 * r}, 0,
               "bucket c");
    std::vector<double> scatter;
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * rank + i;
      scatter.push_back(j < 7 ? 200.0 + 2 * j : 0.0);
    }
    ExpectNear(session.read_floats("d_out"), scatter, 0, "padded reduce-scatter after the bucket");
  });
  EXPECT_EQ(errors, std::vector<std::string>(kWorld, ""));
}

// bfloat16 collectives run on bfloat16 (no float casts): an all-reduce, a fused bucket, a
// reduce-scatter with padding and a truncated all-gather; sums here are exact in bfloat16.
TEST(SessionComm, BFloat16CollectivesReduceAndGatherInBFloat16) {
  PlanBuilder b;
  const int g = b.Tensor("g", {5}, plan::BFLOAT16);
  const int b1 = b.Tensor("b1", {3}, plan::BFLOAT16);
  const int b2 = b.Tensor("b2", {2}, plan::BFLOAT16);
  const int scatter_in = b.Tensor("scatter_in", {7}, plan::BFLOAT16);  // padded to 2 x 4
  const int scatter_out = b.Tensor("scatter_out", {4}, plan::BFLOAT16);
  const int gather_in = b.Tensor("gather_in", {3}, plan::BFLOAT16);
  const int gather_out = b.Tensor("gather_out", {5}, plan::BFLOAT16);  // the first 5 of 2 x 3
  plan::Plan base = b.Build();
  base.add_streams()->set_name("comm");
  AddGroup(base, 0, {0, 1});
  AddCollective(base, 0, plan::Collective::ALL_REDUCE, 0, {g}, {g}, true);
  AddCollective(base, 0, plan::Collective::ALL_REDUCE, 0, {b1, b2}, {b1, b2});  // a bucket
  AddCollective(base, 0, plan::Collective::REDUCE_SCATTER, 0, {scatter_in}, {scatter_out});
  AddCollective(base, 0, plan::Collective::ALL_GATHER, 0, {gather_in}, {gather_out});
  // bfloat16 of small integers and halves: their upper 16 bits as float32.
  auto bf16 = [](const std::vector<float>& values) {
    std::vector<uint16_t> bits;
    for (float value : values) {
      uint32_t word;
      std::memcpy(&word, &value, sizeof word);
      EXPECT_EQ(word & 0xffffu, 0u) << value << " is not a bfloat16";
      bits.push_back(static_cast<uint16_t>(word >> 16));
    }
    return bits;
  };
  const auto errors = RunRanks([&](int rank, CommunicatorFactory& factory) {
    plan::Plan plan = base;
    SetRank(plan, rank);
    Session session(plan, std::make_unique<cpu::CpuBackend>(), {0, &factory});
    auto write = [&](const std::string& name, const std::vector<float>& values) {
      const std::vector<uint16_t> bits = bf16(values);
      session.write_tensor(name, bits.data(), bits.size() * sizeof(uint16_t));
    };
    auto read = [&](const std::string& name) {
      const std::vector<uint8_t> bytes = session.read_tensor(name);
      std::vector<uint16_t> bits(bytes.size() / sizeof(uint16_t));
      std::memcpy(bits.data(), bytes.data(), bytes.size());
      return bits;
    };
    const float r = static_cast<float>(rank);
    write("g", Floats(5, 10 * r));  // average over ranks of 10 r + i = 5 + i
    write("b1", Floats(3, r));
    write("b2", Floats(2, 5 * r));
    write("scatter_in", Floats(7, 100 * r));
    write("gather_in", Floats(3, 10 * r, 0.5f));
    session.step({});
    EXPECT_EQ(read("g"), bf16({5, 6, 7, 8, 9})) << "all-reduce average, rank " << rank;
    EXPECT_EQ(read("b1"), bf16({1, 3, 5})) << "bucket b1, rank " << rank;
    EXPECT_EQ(read("b2"), bf16({5, 7})) << "bucket b2, rank " << rank;
    std::vector<float> scatter;
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * rank + i;
      scatter.push_back(j < 7 ? 100.0f + 2.0f * static_cast<float>(j) : 0.0f);
    }
    EXPECT_EQ(read("scatter_out"), bf16(scatter)) << "reduce-scatter, rank " << rank;
    EXPECT_EQ(read("gather_out"), bf16({0, 0.5f, 1, 10, 10.5f})) << "all-gather, rank " << rank;
  });
  EXPECT_EQ(errors, std::vector<std::string>(kWorld, ""));

  // One bucket, one dtype: the fused buffer is of one element type.
  PlanBuilder mixed;
  const int f = mixed.Tensor("f", {2});
  const int h = mixed.Tensor("h", {2}, plan::BFLOAT16);
  const int i = mixed.Tensor("i", {2}, plan::INT64);
  plan::Plan plan = mixed.Build();
  plan.add_streams()->set_name("comm");
  SetRank(plan, 0);
  AddGroup(plan, 0, {0, 1});
  AddCollective(plan, 0, plan::Collective::ALL_REDUCE, 0, {f, h}, {f, h});
  try {
    Session session(plan, std::make_unique<cpu::CpuBackend>());
    ADD_FAILURE() << "a bucket of float32 and bfloat16 loaded";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("all_reduce tensor 1 'h' -> tensor 1 'h': the tensors of "
                                        "one all_reduce share a dtype, but this pair is bfloat16 "
                                        "and the first float32"));
  }
  plan.mutable_streams(0)->mutable_instructions(0)->mutable_collective()->set_inputs(1, i);
  plan.mutable_streams(0)->mutable_instructions(0)->mutable_collective()->set_outputs(1, i);
  try {
    Session session(plan, std::make_unique<cpu::CpuBackend>());
    ADD_FAILURE() << "an int64 all-reduce loaded";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("all_reduce needs float32 or bfloat16 tensors, got int64"));
  }
}

// Rank 1's compute stream fails (a label out of range) while its other stream waits for a
// transfer that never comes: the step must end at once, not after the timeout; rank 0, waiting
// on rank 1, then loses it, in the recv or, where rank 1 ended before their pair had connected
// (2 runs in 180 under load), while connecting it.
TEST(SessionComm, AFailingKernelAbortsWaitingTransfersAndThePeerNotices) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = RunRanks(
      [&](int rank, CommunicatorFactory& factory) {
        PlanBuilder b;
        const int scores = b.Tensor("scores", {2, 3});
        const int labels = b.Tensor("labels", {2}, plan::INT64);
        const int loss = b.Tensor("loss", {});
        const int inbox = b.Tensor("inbox", {4});
        if (rank == 1) {
          b.Constant<int64_t>(labels, {0, 9});
          b.Kernel("compute", "SoftmaxCrossEntropyLoss", {scores, labels}, {loss});
        }
        plan::Plan plan = b.Build();
        SetRank(plan, rank);
        plan::Instruction* recv = plan.add_streams()->add_instructions();
        plan.mutable_streams(plan.streams_size() - 1)->set_name("recv");
        recv->mutable_recv()->set_tensor(inbox);
        recv->mutable_recv()->set_peer(1 - rank);
        recv->mutable_recv()->set_tag(3);
        Session session(plan, std::make_unique<cpu::CpuBackend>(), {0, &factory});
        session.step({});
      },
      20s);
  EXPECT_THAT(errors[1], HasSubstr("label 9"));
  EXPECT_THAT(errors[0], AnyOf(HasSubstr("rank 0 lost rank 1 in recv of tag 3 of pair 0-1"),
                               HasSubstr("rank 0 cannot connect pair 0-1 (ranks 0,1)")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(SessionComm, MultiRankPlansNeedCommunicatorsAndValidGroups) {
  PlanBuilder b;
  const int x = b.Tensor("x", {4});
  const int one = b.Tensor("one", {1});
  b.Kernel("main", "Neg", {x}, {x});
  plan::Plan plan = b.Build();
  SetRank(plan, 0);
  AddGroup(plan, 0, {0, 1});
  AddCollective(plan, 0, plan::Collective::ALL_REDUCE, 0, {x}, {x});
  auto load_error = [](const plan::Plan& p, CommunicatorFactory* factory = nullptr) {
    try {
      Session session(p, std::make_unique<cpu::CpuBackend>(), {0, factory});
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_THAT(load_error(plan), HasSubstr("rank 0 of 2: group 0 needs communicators, which "
                                          "piper-run connects through a rendezvous"));
  plan::Plan bad_rank = plan;
  bad_rank.mutable_groups(0)->add_ranks(2);
  EXPECT_THAT(load_error(bad_rank), HasSubstr("group 0 lists rank 2, outside the world size 2"));
  plan::Plan undefined = plan;
  undefined.mutable_streams(0)->mutable_instructions(1)->mutable_collective()->set_group(4);
  undefined.clear_groups();
  EXPECT_THAT(load_error(undefined),
              HasSubstr("stream 'main' instruction 1 (ALL_REDUCE over group 4): collective over "
                        "group 4, which the plan does not define"));

  // Element counts are checked against the group size when the plan loads.
  const auto errors = RunRanks([&](int rank, CommunicatorFactory& factory) {
    plan::Plan p = plan;
    SetRank(p, rank);
    plan::Collective* collective =
        p.mutable_streams(0)->mutable_instructions(1)->mutable_collective();
    collective->set_kind(plan::Collective::REDUCE_SCATTER);
    collective->set_outputs(0, one);
    EXPECT_THAT(load_error(p, &factory),
                HasSubstr("reduce_scatter tensor 0 'x' -> tensor 1 'one': input has 4 elements, "
                          "more than a group of 2 times the output's 1"))
        << "rank " << rank;
  });
  EXPECT_EQ(errors, std::vector<std::string>(kWorld, ""));
}

// Gradients that microbatches accumulate into start every step at zero.
TEST(SessionComm, ZeroAtStepStartResetsAccumulators) {
  PlanBuilder b;
  const int one = b.Tensor("one", {2}, plan::FLOAT32, plan::CONSTANT);
  const int sum = b.Tensor("sum", {2}, plan::FLOAT32, plan::GRADIENT);
  const int kept = b.Tensor("kept", {2}, plan::FLOAT32, plan::GRADIENT);
  b.Constant<float>(one, {1, 2});
  b.Kernel("main", "Add", {sum, one}, {sum});
  b.Kernel("main", "Add", {kept, one}, {kept});
  plan::Plan plan = b.Build();
  plan.mutable_tensors(sum)->set_zero_at_step_start(true);
  Session session(plan, std::make_unique<cpu::CpuBackend>());
  for (int step = 1; step <= 3; ++step) {
    session.step({});
    ExpectNear(session.read_floats("sum"), {1, 2}, 0, "zeroed each step");
    ExpectNear(session.read_floats("kept"), {1.0 * step, 2.0 * step}, 0, "kept across steps");
  }
}

}  // namespace
}  // namespace piper::engine::testing
