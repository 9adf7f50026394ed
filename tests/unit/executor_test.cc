// The executor through Session: several streams ordered by events, deadlock and event
// checks at load time, failures that stop every stream.
#include "engine/runtime/executor.h"

#include <gmock/gmock.h>
#include <sched.h>

#include "engine/runtime/session.h"
#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Session> Load(const plan::Plan& plan) {
  return std::make_unique<Session>(plan, std::make_unique<cpu::CpuBackend>());
}

std::string LoadError(const plan::Plan& plan) {
  try {
    Load(plan);
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

// Two streams take turns updating one tensor in place: s0 adds 1, s1 doubles, for `rounds`
// rounds, each turn handed over by an event. Any misordering changes the result.
TEST(Executor, TwoStreamsAlternateThroughEvents) {
  constexpr int kRounds = 20;
  constexpr int64_t kSize = 4096;
  PlanBuilder b;
  const int t = b.Tensor("t", {kSize});
  const int one = b.Tensor("one", {}, plan::FLOAT32, plan::CONSTANT);
  const int two = b.Tensor("two", {}, plan::FLOAT32, plan::CONSTANT);
  b.Constant<float>(one, {1.0f});
  b.Constant<float>(two, {2.0f});
  for (int k = 0; k < kRounds; ++k) {
    if (k > 0) b.Wait("s0", 2 * k - 1);
    b.Kernel("s0", "Add", {t, one}, {t});
    b.Record("s0", 2 * k);
    b.Wait("s1", 2 * k);
    b.Kernel("s1", "Mul", {t, two}, {t});
    b.Record("s1", 2 * k + 1);
  }
  auto session = Load(b.Build());
  EXPECT_EQ(session->num_streams(), 2u);
  EXPECT_EQ(session->num_kernels(), 2u * kRounds);
  double expected = 0;
  for (int k = 0; k < kRounds; ++k) expected = (expected + 1) * 2;
  for (int step = 0; step < 10; ++step) {
    const std::vector<float> zeros(kSize, 0.0f);
    session->write_tensor("t", zeros.data(), zeros.size() * sizeof(float));
    session->step({});
    const auto values = session->read_floats("t");
    ASSERT_EQ(values.front(), expected) << "step " << step;
    ASSERT_EQ(values.back(), expected) << "step " << step;
  }
}

// Independent streams calling BLAS at the same time get the same results as one stream.
TEST(Executor, ConcurrentGemmsOnSeveralStreams) {
  constexpr int64_t kDim = 96;
  constexpr int kRepeats = 20;
  PlanBuilder b;
  const int a = b.Tensor("a", {kDim, kDim}, plan::FLOAT32, plan::CONSTANT);
  b.Constant<float>(a, TestValues(kDim * kDim, 31));
  std::vector<int> outputs;
  for (int s = 0; s < 3; ++s) {
    const int y = b.Tensor("y" + std::to_string(s), {kDim, kDim});
    outputs.push_back(y);
    for (int r = 0; r < kRepeats; ++r) {
      b.Kernel("s" + std::to_string(s), "Gemm", {a, a}, {y}, {Float("alpha", 1.0 + s)});
    }
  }
  auto session = Load(b.Build());
  session->step({});
  const auto base = session->read_floats("y0");
  for (int s = 1; s < 3; ++s) {
    std::vector<double> expected;
    for (float v : base) expected.push_back(v * (1.0 + s));
    ExpectNear(session->read_floats("y" + std::to_string(s)), expected, 1e-5,
               "stream s" + std::to_string(s), 1e-6);
  }
}

// A fork and join: s1 and s2 each wait for s0's input, s0 waits for both results.
TEST(Executor, ForkJoinAcrossThreeStreams) {
  PlanBuilder b;
  const int x = b.Tensor("x", {3});
  const int a = b.Tensor("a", {3});
  const int c = b.Tensor("c", {3});
  const int y = b.Tensor("y", {3});
  b.Kernel("s0", "Relu", {x}, {x});
  b.Record("s0", 0);
  b.Wait("s1", 0);
  b.Kernel("s1", "Neg", {x}, {a});
  b.Record("s1", 1);
  b.Wait("s2", 0);
  b.Kernel("s2", "Add", {x, x}, {c});
  b.Record("s2", 2);
  b.Wait("s0", 1);
  b.Wait("s0", 2);
  b.Kernel("s0", "Mul", {a, c}, {y});
  auto session = Load(b.Build());
  const std::vector<float> xv = {-1, 2, 3};
  session->write_tensor("x", xv.data(), sizeof(float) * 3);
  session->step({});
  ExpectNear(session->read_floats("y"), {0, -8, -18}, 0, "y");
}

TEST(Executor, SingleStreamRunsInlineWithItsOwnEvents) {
  PlanBuilder b;
  const int x = b.Tensor("x", {2});
  const int y = b.Tensor("y", {2});
  b.Record("main", 0);
  b.Wait("main", 0);
  b.Kernel("main", "Neg", {x}, {y});
  auto session = Load(b.Build());
  const std::vector<float> xv = {1, -2};
  session->write_tensor("x", xv.data(), sizeof(float) * 2);
  session->step({});
  ExpectNear(session->read_floats("y"), {-1, 2}, 0, "y");
}

TEST(Executor, DetectsDeadlockAtLoad) {
  PlanBuilder b;
  const int x = b.Tensor("x", {2});
  b.Wait("s0", 0);
  b.Kernel("s0", "Neg", {x}, {x}, {}, "first");
  b.Record("s0", 1);
  b.Wait("s1", 1);
  b.Record("s1", 0);
  const std::string error = LoadError(b.Build());
  EXPECT_THAT(error, HasSubstr("the plan's streams deadlock"));
  EXPECT_THAT(error, HasSubstr("stream 's0' instruction 0 waits for event 0"));
  EXPECT_THAT(error, HasSubstr("stream 's1' instruction 0 waits for event 1"));
}

TEST(Executor, RejectsUnrecordedDoublyRecordedAndOutOfRangeEvents) {
  {
    PlanBuilder b;
    b.Wait("s0", 0);
    b.Record("s1", 1);
    EXPECT_THAT(LoadError(b.Build()),
                HasSubstr("stream 's0' instruction 0 waits for event 0, which no instruction "
                          "records"));
  }
  {
    PlanBuilder b;
    b.Record("s0", 0);
    b.Record("s1", 0);
    EXPECT_THAT(LoadError(b.Build()), HasSubstr("records event 0, already recorded by stream 's0' "
                                                "instruction 0; each event is recorded once"));
  }
  {
    PlanBuilder b;
    b.Record("s0", 0);
    plan::Plan plan = b.Build();
    plan.mutable_streams(0)->mutable_instructions(0)->mutable_record()->set_event(5);
    EXPECT_THAT(LoadError(plan), HasSubstr("uses event 5 but the plan has 1 events"));
  }
}

// A kernel failing on one stream stops the step; the stream waiting for it does not hang.
TEST(Executor, FailureStopsAllStreamsAndNamesTheInstruction) {
  PlanBuilder b;
  const int scores = b.Tensor("scores", {2, 3});
  const int labels = b.Tensor("labels", {2}, plan::INT64, plan::CONSTANT);
  const int loss = b.Tensor("loss", {});
  const int y = b.Tensor("y", {});
  b.Constant<int64_t>(labels, {0, 9});
  b.Kernel("s0", "SoftmaxCrossEntropyLoss", {scores, labels}, {loss}, {}, "/loss");
  b.Record("s0", 0);
  b.Wait("s1", 0);
  b.Kernel("s1", "Neg", {loss}, {y});
  auto session = Load(b.Build());
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      session->step({});
      FAIL() << "expected an error";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr("stream 's0' instruction 0 (SoftmaxCrossEntropyLoss "
                                          "'/loss'): SoftmaxCrossEntropyLoss: label 9"));
    }
  }
  EXPECT_EQ(session->steps_done(), 0);
}

TEST(Executor, PrepareErrorsNameTheInstruction) {
  PlanBuilder b;
  const int x = b.Tensor("x", {2});
  b.Kernel("main", "Neg", {x}, {x});
  b.Kernel("main", "Conv", {x}, {x}, {}, "/conv1");
  EXPECT_THAT(LoadError(b.Build()),
              HasSubstr("stream 'main' instruction 1 (Conv '/conv1'): op type 'Conv' is not "
                        "supported by the cpu backend"));
}

TEST(Executor, RejectsTensorIndexOutOfRange) {
  PlanBuilder b;
  const int x = b.Tensor("x", {2});
  b.Kernel("main", "Neg", {x}, {7});
  EXPECT_THAT(LoadError(b.Build()),
              HasSubstr("stream 'main' instruction 0 (Neg 'Neg'): output tensor index 7 is out "
                        "of range"));
}

// On one rank a collective over a group of one is a copy; larger groups and point-to-point
// transfers need communicators (tests/unit/session_comm_test.cc runs them).
TEST(Executor, SingleRankCollectiveCopiesAndTransfersNeedCommunicators) {
  PlanBuilder b;
  const int g = b.Tensor("g", {3});
  const int r = b.Tensor("r", {3});
  b.Kernel("main", "Neg", {g}, {g});
  plan::Plan plan = b.Build();
  plan::CommGroup* group = plan.add_groups();
  group->set_id(4);
  group->add_ranks(0);
  plan::Collective* collective = plan.mutable_streams(0)->add_instructions()->mutable_collective();
  collective->set_kind(plan::Collective::ALL_REDUCE);
  collective->set_group(4);
  collective->set_average(true);
  collective->add_inputs(g);
  collective->add_outputs(r);
  {
    Session session(plan, std::make_unique<cpu::CpuBackend>());
    const std::vector<float> values = {1, 2, 3};
    session.write_tensor("g", values.data(), sizeof(float) * 3);
    session.step({});
    ExpectNear(session.read_floats("r"), {-1, -2, -3}, 0, "all-reduce over one rank");
  }
  plan.mutable_header()->set_world_size(2);
  group->add_ranks(1);
  EXPECT_THAT(LoadError(plan), HasSubstr("rank 0 of 2: group 4 needs communicators"));
  plan.mutable_streams(0)->mutable_instructions(1)->mutable_send()->set_peer(1);
  plan.clear_groups();
  EXPECT_THAT(LoadError(plan), HasSubstr("send/recv with rank 1 needs communicators"));
}

// Records the scheduling policy of the thread that runs it.
class PolicyProbe : public PreparedKernel {
 public:
  explicit PolicyProbe(int* policy) : policy_(policy) {}
  void run(const StepContext&) override { *policy_ = ::sched_getscheduler(0); }

 private:
  int* policy_;
};

// A background stream runs as a batch thread, so that its wakeups do not preempt a computing
// stream on the same core; other streams keep the normal policy.
TEST(Executor, BackgroundStreamsRunAsBatchThreads) {
  auto probed = [](std::string name, bool background, int* policy) {
    ExecStream stream{std::move(name), {}, background};
    ExecInstruction probe;
    probe.kernel = std::make_unique<PolicyProbe>(policy);
    stream.instructions.push_back(std::move(probe));
    return stream;
  };
  int computing = -1, reducing = -1;
  std::vector<ExecStream> streams;
  streams.push_back(probed("compute", false, &computing));
  streams.push_back(probed("dp_reduce", true, &reducing));
  Executor executor(std::move(streams), 0);
  executor.run_step({});
  EXPECT_EQ(computing, SCHED_OTHER);
  EXPECT_EQ(reducing, SCHED_BATCH);
}

}  // namespace
}  // namespace piper::engine::testing
