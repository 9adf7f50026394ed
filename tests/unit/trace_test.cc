// Tracing a step: the executor times kernels only while tracing is on, in
// stream order and across events; chrome_trace groups a stream's consecutive
// instructions of one task into one event holding its kernels.
#include "engine/runtime/trace.h"

#include <gtest/gtest.h>

#include "engine/launch/trace_merge.h"
#include "engine/runtime/session.h"
#include "engine_test_util.h"
#include "formats/error.h"

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

TEST(Trace, StepsOfSeveralAreOneFileOnTheSystemClock) {
  const plan::Plan plan = two_streams();
  Session session(plan, std::make_unique<cpu::CpuBackend>());
  session.set_tracing(true);
  std::vector<TracedStep> steps;
  for (int64_t step : {3, 4}) {
    session.step({});
    steps.push_back({step, session.last_trace()});
  }
  const nlohmann::json trace = chrome_trace(plan, steps, "cpu");
  EXPECT_EQ(trace.at("otherData").at("steps"), nlohmann::json({3, 4}));
  EXPECT_EQ(trace.at("otherData").at("step"), 4);
  EXPECT_DOUBLE_EQ(trace.at("otherData").at("origin_unix_us").get<double>(),
                   steps[0].trace.start_unix_us);
  double last_end_of_3 = 0, first_start_of_4 = 1e300;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X" || event.at("cat") == "kernel") continue;
    const double ts = event.at("ts"), end = ts + event.at("dur").get<double>();
    if (event.at("args").at("step") == 3) last_end_of_3 = std::max(last_end_of_3, end);
    if (event.at("args").at("step") == 4) first_start_of_4 = std::min(first_start_of_4, ts);
  }
  EXPECT_GT(last_end_of_3, 0);
  EXPECT_LE(last_end_of_3, first_start_of_4);
}

TEST(Trace, StepListsAndFlowIds) {
  EXPECT_EQ(parse_step_list("5,10-12"), (std::vector<int64_t>{5, 10, 11, 12}));
  EXPECT_EQ(parse_step_list("3,1-3"), (std::vector<int64_t>{1, 2, 3}));
  for (const char* bad : {"", "0", "2,", "a", "5-3", "1--2", "-4"}) {
    EXPECT_THROW(parse_step_list(bad), Error) << bad;
  }
  EXPECT_EQ(transfer_flow_id(2, 0, 1, 7), transfer_flow_id(2, 0, 1, 7));
  EXPECT_NE(transfer_flow_id(2, 0, 1, 7), transfer_flow_id(2, 1, 0, 7));
  EXPECT_NE(transfer_flow_id(2, 0, 1, 7), transfer_flow_id(3, 0, 1, 7));
  EXPECT_LT(transfer_flow_id(2, 0, 1, 7), uint64_t{1} << 53);
}

TEST(TraceMerge, ShiftsEachRankToTheEarliestOriginAndRefusesOtherRuns) {
  const auto rank = [](int r, double origin, const std::string& plan_id) {
    return nlohmann::json{
        {"traceEvents",
         {{{"ph", "M"}, {"name", "process_name"}, {"pid", r}},
          {{"ph", "X"}, {"name", "F mb0"}, {"pid", r}, {"ts", 10.0}, {"dur", 5.0}}}},
        {"otherData", {{"plan_id", plan_id}, {"rank", r}, {"origin_unix_us", origin}}}};
  };
  const nlohmann::json merged =
      merge_traces({rank(0, 1000, "p"), rank(1, 1250, "p")}, {"r0.json", "r1.json"});
  std::vector<double> ts;
  for (const nlohmann::json& event : merged.at("traceEvents")) {
    if (event.contains("ts")) ts.push_back(event.at("ts"));
  }
  EXPECT_EQ(ts, (std::vector<double>{10, 260}));
  EXPECT_EQ(merged.at("otherData").at("ranks"), 2);
  EXPECT_EQ(merged.at("otherData").at("origin_unix_us"), 1000);
  try {
    merge_traces({rank(0, 1000, "p"), rank(1, 1000, "q")}, {"r0.json", "r1.json"});
    FAIL() << "traces of two planning runs merged";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("r1.json comes from another planning run"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(merge_traces({nlohmann::json::object()}, {"empty.json"}), Error);
}

}  // namespace
}  // namespace piper::engine::testing
