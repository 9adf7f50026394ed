// Tracing a step: the executor times kernels only while tracing is on, in
// stream order and across events; chrome_trace groups a stream's consecutive
// instructions of one task into one event holding its kernels.
#include "engine/runtime/trace.h"

#include <gtest/gtest.h>

#include "engine/runtime/session.h"
#include "engine_test_util.h"

namespace piper::engine::testing {
namespace {

// s0: task 1 (F mb2: two Adds, then a record), task 2 (B mb2: one Mul);
// s1: task 3 waits for task 1, then one Mul.
plan::Plan two_streams() {
  PlanBuilder b;
  const int t = b.Tensor("t", {64});
  const int u = b.Tensor("u", {64});
  const int one = b.Tensor("one", {}, plan::FLOAT32, plan::CONSTANT);
  b.Constant<float>(one, {1.0f});
  b.Kernel("s0", "Add", {t, one}, {t});
  b.Kernel("s0", "Add", {t, one}, {t}, {}, "/second/Add");
  b.Record("s0", 0);
  b.Kernel("s0", "Mul", {t, one}, {t});
  b.Wait("s1", 0);
  b.Kernel("s1", "Mul", {t, one}, {u});
  plan::Plan plan = b.Build();
  const auto mark = [&](int stream, int instruction, int task, plan::Pass pass) {
    plan::Instruction& inst = *plan.mutable_streams(stream)->mutable_instructions(instruction);
    inst.set_task(task);
    inst.set_pass(pass);
    inst.set_microbatch(2);
  };
  for (int i = 0; i < 3; ++i) mark(0, i, 1, plan::FORWARD);
  mark(0, 3, 2, plan::BACKWARD);
  mark(1, 0, 3, plan::FORWARD);
  mark(1, 1, 3, plan::FORWARD);
  return plan;
}

TEST(Trace, TimesKernelsOnlyWhileTracing) {
  const plan::Plan plan = two_streams();
  Session session(plan, std::make_unique<cpu::CpuBackend>());
  session.step({});
  EXPECT_TRUE(session.last_trace().streams.empty());
  session.set_tracing(true);
  session.step({});
  const StepTrace& trace = session.last_trace();
  ASSERT_EQ(trace.streams.size(), 2u);
  ASSERT_EQ(trace.streams[0].size(), 4u);
  ASSERT_EQ(trace.streams[1].size(), 2u);
  EXPECT_TRUE(trace.streams[0][0].ran);
  EXPECT_FALSE(trace.streams[0][2].ran);  // the record
  EXPECT_FALSE(trace.streams[1][0].ran);  // the wait
  for (const auto& stream : trace.streams) {
    double last_end = 0;
    for (const InstructionTime& time : stream) {
      if (!time.ran) continue;
      EXPECT_LE(last_end, time.start);
      EXPECT_LE(time.start, time.end);
      last_end = time.end;
    }
  }
  // s1's Mul waited for the record after s0's second Add.
  EXPECT_GE(trace.streams[1][1].start, trace.streams[0][1].end);
}

TEST(Trace, ChromeTraceHasATaskEventPerTaskWithItsKernels) {
  const plan::Plan plan = two_streams();
  Session session(plan, std::make_unique<cpu::CpuBackend>());
  session.set_tracing(true);
  session.step({});
  const nlohmann::json trace = chrome_trace(plan, session.last_trace(), 7, "cpu");
  std::vector<std::string> threads;
  std::vector<nlohmann::json> tasks;
  int kernels = 0;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    EXPECT_EQ(event.at("pid"), 0);
    if (event.at("ph") == "M" && event.at("name") == "thread_name") {
      threads.push_back(event.at("args").at("name"));
    } else if (event.at("ph") == "X" && event.at("cat") == "kernel") {
      ++kernels;
    } else if (event.at("ph") == "X") {
      tasks.push_back(event);
    }
  }
  EXPECT_EQ(threads, (std::vector<std::string>{"s0", "s1"}));
  EXPECT_EQ(kernels, 4);
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0].at("name"), "F mb2");
  EXPECT_EQ(tasks[0].at("args").at("task"), 1);
  EXPECT_EQ(tasks[0].at("args").at("kernels"), 2);
  EXPECT_EQ(tasks[1].at("name"), "B mb2");
  EXPECT_EQ(tasks[1].at("args").at("pass"), "B");
  EXPECT_EQ(tasks[2].at("tid"), 1);
  EXPECT_EQ(tasks[2].at("args").at("microbatch"), 2);
  EXPECT_EQ(trace.at("otherData").at("step"), 7);
}

}  // namespace
}  // namespace piper::engine::testing
