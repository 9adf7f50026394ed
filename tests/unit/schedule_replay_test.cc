// The schedule replay: bubble fractions and peak live activations of the
// generated schedules for p = 4 devices and m = 8 microbatches against their
// closed forms, transfer latency, and orders that deadlock or make no sense.
#include "planner/sim/schedule_replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace piper::planner::sim {
namespace {

using schedule::PipelineOrder;
using schedule::PipelineShape;
using ::testing::ElementsAre;

constexpr std::string_view kPath = "s.json: $.directives[0]";
constexpr PipelineShape kFourByEight{.devices = 4, .microbatches = 8};

// One device order per string, slots written "F0@1" (pass, microbatch, stage).
PipelineOrder order_of(const std::vector<std::string>& devices) {
  PipelineOrder order;
  for (const std::string& text : devices) {
    std::istringstream words(text);
    schedule::DeviceOrder& device = order.emplace_back();
    for (std::string word; words >> word;) {
      const size_t digit = word.find_first_of("0123456789");
      const size_t at = word.find('@');
      device.push_back({.stage = std::stoll(word.substr(at + 1)),
                        .microbatch = std::stoll(word.substr(digit, at - digit)),
                        .pass = ir::parse_pass(word.substr(0, digit))});
    }
  }
  return order;
}

std::vector<double> idle_per_device(const ReplayResult& result) {
  std::vector<double> idle;
  for (const DeviceReplay& device : result.devices) idle.push_back(device.idle);
  return idle;
}

std::vector<int64_t> peaks(const ReplayResult& result) {
  std::vector<int64_t> peak;
  for (const DeviceReplay& device : result.devices) peak.push_back(device.peak_live_activations);
  return peak;
}

// The message replay throws for `order`, or "" when it replays.
std::string error_of(const PipelineOrder& order) {
  try {
    replay(order);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// With F = 1 and B = 2 every device works 3m and waits 3(p-1).
TEST(ScheduleReplay, GpipeAndOneFOneBBubbleIsPMinus1OverMPlusPMinus1) {
  for (const char* name : {"gpipe", "1f1b"}) {
    const ReplayResult result = replay(schedule::pipeline_order(name, kFourByEight, kPath));
    EXPECT_DOUBLE_EQ(result.makespan, 33) << name;
    EXPECT_THAT(idle_per_device(result), ElementsAre(9, 9, 9, 9)) << name;
    EXPECT_DOUBLE_EQ(result.bubble_fraction(), 3.0 / (8 + 3)) << name;
  }
}

TEST(ScheduleReplay, InterleavedBubbleIsPMinus1OverVMPlusPMinus1) {
  const ReplayResult result =
      replay(schedule::interleaved({.devices = 4, .microbatches = 8, .chunks = 2}, kPath));
  EXPECT_DOUBLE_EQ(result.makespan, 57);  // each of 2 chunks: F = 1, B = 2
  EXPECT_DOUBLE_EQ(result.bubble_fraction(), 3.0 / (2 * 8 + 3));
}

// F = BI = BW = 1, the same work as 1F1B's F = 1, B = 2: the idle time is
// (p-1)(F + BI - BW) = 3, a third of 1F1B's 9.
TEST(ScheduleReplay, ZbH1BubbleIsAThirdOfOneFOneBs) {
  const ReplayResult one_f_one_b = replay(schedule::one_f_one_b(kFourByEight, kPath));
  const ReplayResult zb_h1 = replay(schedule::zb_h1(kFourByEight, kPath));
  EXPECT_DOUBLE_EQ(zb_h1.makespan, 27);
  EXPECT_THAT(idle_per_device(zb_h1), ElementsAre(3, 3, 3, 3));
  EXPECT_DOUBLE_EQ(zb_h1.bubble_fraction(), 3.0 / 27);
  for (size_t device = 0; device < 4; ++device) {
    EXPECT_DOUBLE_EQ(zb_h1.devices[device].idle * 3, one_f_one_b.devices[device].idle);
  }
}

TEST(ScheduleReplay, PeakLiveActivations) {
  EXPECT_THAT(peaks(replay(schedule::gpipe(kFourByEight, kPath))), ElementsAre(8, 8, 8, 8));
  EXPECT_THAT(peaks(replay(schedule::one_f_one_b(kFourByEight, kPath))), ElementsAre(4, 3, 2, 1));
  // Live until BW: every device holds as many as 1F1B's first stage.
  EXPECT_THAT(peaks(replay(schedule::zb_h1(kFourByEight, kPath))), ElementsAre(4, 4, 4, 4));
  // Chunk activations, each half a stage's.
  EXPECT_THAT(
      peaks(replay(schedule::interleaved({.devices = 4, .microbatches = 8, .chunks = 2}, kPath))),
      ElementsAre(11, 9, 7, 5));
}

// DualPipe's table: PP+1 live microbatch activations on every device, for DualPipeV with PP
// stages on PP/2 devices too. With F = BI = BW = 1 every device idles PP/2-1, where 1F1B's
// idle 3(PP-1) and ZB-H1's PP-1: the replay's closed form on uniform stages is
// (PP/2-1)(F + BI - BW) for F >= BI (see docs/strategy.md).
TEST(ScheduleReplay, DualPipeIdlesPOver2Minus1AndHoldsPPlus1Activations) {
  for (int64_t p : {4, 8}) {
    const ReplayResult dualpipe =
        replay(schedule::dualpipe({.devices = p, .microbatches = 2 * p}, kPath));
    const ReplayResult dualpipev =
        replay(schedule::dualpipev({.devices = p / 2, .microbatches = 2 * p}, kPath));
    for (const ReplayResult* result : {&dualpipe, &dualpipev}) {
      for (const DeviceReplay& device : result->devices) {
        EXPECT_DOUBLE_EQ(device.idle, p / 2 - 1) << "p = " << p;
        EXPECT_EQ(device.peak_live_activations, p + 1) << "p = " << p;
      }
    }
  }
  const PassDurations heavy_forward{
      .forward = 2, .backward = 2, .backward_input = 1, .backward_weight = 1};
  const ReplayResult result =
      replay(schedule::dualpipe({.devices = 8, .microbatches = 32}, kPath), heavy_forward);
  EXPECT_THAT(idle_per_device(result), ElementsAre(6, 6, 6, 6, 6, 6, 6, 6));  // 3 (2 + 1 - 1)
}

TEST(ScheduleReplay, TransferLatencyDelaysCrossDeviceDependencies) {
  const ReplayResult result =
      replay(schedule::gpipe({.devices = 2, .microbatches = 1}, kPath), {.transfer = 0.5});
  // F@0 [0, 1], F@1 [1.5, 2.5], B@1 [2.5, 4.5], B@0 [5, 7].
  EXPECT_THAT(result.devices[0].starts, ElementsAre(0, 5));
  EXPECT_THAT(result.devices[1].starts, ElementsAre(1.5, 2.5));
  EXPECT_DOUBLE_EQ(result.makespan, 7);
  EXPECT_DOUBLE_EQ(result.devices[0].idle, 4);
}

TEST(ScheduleReplay, SplitBackwardDurationsApply) {
  const ReplayResult result =
      replay(order_of({"F0@0 BI0@0 BW0@0"}), {.backward_input = 3, .backward_weight = 5});
  EXPECT_THAT(result.devices[0].starts, ElementsAre(0, 1, 4));
  EXPECT_DOUBLE_EQ(result.makespan, 9);
  EXPECT_DOUBLE_EQ(result.bubble_fraction(), 0);
}

// Device 0 runs B0 before F1, device 1 F1 before B0: each waits on the other.
TEST(ScheduleReplay, CrossDeviceWaitIsADeadlock) {
  const PipelineOrder order = order_of({"F0@0 B0@0 F1@0 B1@0", "F0@1 F1@1 B0@1 B1@1"});
  EXPECT_EQ(error_of(order),
            "device 0 slot 1 (B0 of stage 0) can never run: it needs B0 or BI0 of stage 1, which "
            "device 1 runs at slot 2 but it is stuck at slot 1 (F1 of stage 1)");
  try {
    replay(order);
    ADD_FAILURE() << "expected a deadlock";
  } catch (const DeadlockError& error) {
    EXPECT_EQ(error.device, 0);
    EXPECT_EQ(error.slot, 1u);
  }
}

TEST(ScheduleReplay, BackwardBeforeItsForwardIsADeadlock) {
  EXPECT_EQ(error_of(order_of({"B0@0 F0@0"})),
            "device 0 slot 0 (B0 of stage 0) can never run: it needs F0 of stage 0, which this "
            "device runs later, at slot 1");
}

TEST(ScheduleReplay, MissingDependencyIsADeadlock) {
  EXPECT_EQ(error_of(order_of({"F0@0", "F0@1 BW0@1"})),
            "device 1 slot 1 (BW0 of stage 1) can never run: it needs BI0 of stage 1, which no "
            "device runs");
}

TEST(ScheduleReplay, RefusesRepeatedSlotsAndUpdates) {
  EXPECT_EQ(error_of(order_of({"F0@0 F0@0"})),
            "device 0 slot 1: F0 of stage 0 is already at device 0 slot 0");
  EXPECT_EQ(error_of(order_of({"F0@0 U0@0"})),
            "device 0 slot 1: pass U has no place in a pipeline schedule; slots run F, B, BI or "
            "BW");
}

}  // namespace
}  // namespace piper::planner::sim
