// Pipeline schedule generators: the exact order each emits for p = 4 devices
// and m = 8 microbatches, written out from the published definitions, and
// one test per shape a schedule refuses, checking the field it names.
#include "planner/schedule/pipeline_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "formats/error.h"

namespace piper::planner::schedule {
namespace {

using ::testing::ElementsAre;

constexpr std::string_view kPath = "s.json: $.directives[2]";

// "F0 F1 B0 ..."; with `stages`, each slot also names its stage: "F0@4".
std::string render(const DeviceOrder& order, bool stages = false) {
  std::string text;
  for (const Slot& slot : order) {
    if (!text.empty()) text += ' ';
    text += ir::to_string(slot.pass) + std::to_string(slot.microbatch);
    if (stages) text += "@" + std::to_string(slot.stage);
  }
  return text;
}

std::vector<std::string> render_all(const PipelineOrder& orders, bool stages = false) {
  std::vector<std::string> texts;
  for (const DeviceOrder& order : orders) texts.push_back(render(order, stages));
  return texts;
}

// Every slot of device d is on stage d (one chunk per device).
void expect_own_stage(const PipelineOrder& orders) {
  for (size_t device = 0; device < orders.size(); ++device) {
    for (const Slot& slot : orders[device]) {
      EXPECT_EQ(slot.stage, static_cast<int64_t>(device)) << to_string(slot);
    }
  }
}

std::string error_of(std::string_view schedule, const PipelineShape& shape) {
  try {
    pipeline_order(schedule, shape, kPath);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(PipelineSchedule, GpipeRunsEveryForwardThenEveryBackward) {
  const PipelineOrder orders = gpipe({.devices = 4, .microbatches = 8}, kPath);
  const std::string all = "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7";
  EXPECT_THAT(render_all(orders), ElementsAre(all, all, all, all));
  expect_own_stage(orders);
}

TEST(PipelineSchedule, OneFOneBWarmsUpWithPMinus1MinusDForwards) {
  const PipelineOrder orders = one_f_one_b({.devices = 4, .microbatches = 8}, kPath);
  EXPECT_THAT(render_all(orders), ElementsAre("F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
                                              "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
                                              "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
                                              "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"));
  expect_own_stage(orders);
}

TEST(PipelineSchedule, OneFOneBWarmUpIsCappedByTheMicrobatches) {
  const PipelineOrder orders = one_f_one_b({.devices = 4, .microbatches = 2}, kPath);
  EXPECT_THAT(render_all(orders),
              ElementsAre("F0 F1 B0 B1", "F0 F1 B0 B1", "F0 F1 B0 B1", "F0 B0 F1 B1"));
}

// Megatron-LM: chunk c of device d is stage 4c + d. Device d warms up with
// 2(3-d) + 4 forwards; forward k runs chunk (k mod 8) / 4 on microbatch
// 4(k / 8) + k mod 4, backward k the chunks in reverse.
TEST(PipelineSchedule, InterleavedFollowsMegatron) {
  const PipelineOrder orders = interleaved({.devices = 4, .microbatches = 8, .chunks = 2}, kPath);
  EXPECT_THAT(
      render_all(orders, /*stages=*/true),
      ElementsAre("F0@0 F1@0 F2@0 F3@0 F0@4 F1@4 F2@4 F3@4 F4@0 F5@0 "
                  "F6@0 B0@4 F7@0 B1@4 F4@4 B2@4 F5@4 B3@4 F6@4 B0@0 F7@4 B1@0 "
                  "B2@0 B3@0 B4@4 B5@4 B6@4 B7@4 B4@0 B5@0 B6@0 B7@0",
                  "F0@1 F1@1 F2@1 F3@1 F0@5 F1@5 F2@5 F3@5 "
                  "F4@1 B0@5 F5@1 B1@5 F6@1 B2@5 F7@1 B3@5 F4@5 B0@1 F5@5 B1@1 F6@5 B2@1 F7@5 B3@1 "
                  "B4@5 B5@5 B6@5 B7@5 B4@1 B5@1 B6@1 B7@1",
                  "F0@2 F1@2 F2@2 F3@2 F0@6 F1@6 "
                  "F2@6 B0@6 F3@6 B1@6 F4@2 B2@6 F5@2 B3@6 F6@2 B0@2 F7@2 B1@2 F4@6 B2@2 F5@6 B3@2 "
                  "F6@6 B4@6 F7@6 B5@6 B6@6 B7@6 B4@2 B5@2 B6@2 B7@2",
                  "F0@3 F1@3 F2@3 F3@3 "
                  "F0@7 B0@7 F1@7 B1@7 F2@7 B2@7 F3@7 B3@7 F4@3 B0@3 F5@3 B1@3 F6@3 B2@3 F7@3 B3@3 "
                  "F4@7 B4@7 F5@7 B5@7 F6@7 B6@7 F7@7 B7@7 B4@3 B5@3 B6@3 B7@3"));
}

TEST(PipelineSchedule, InterleavedWithAsManyMicrobatchesAsDevicesRunsEveryForwardFirst) {
  const PipelineOrder orders = interleaved({.devices = 2, .microbatches = 2, .chunks = 2}, kPath);
  EXPECT_THAT(render_all(orders, /*stages=*/true),
              ElementsAre("F0@0 F1@0 F0@2 F1@2 B0@2 B1@2 B0@0 B1@0",
                          "F0@1 F1@1 F0@3 F1@3 B0@3 B1@3 B0@1 B1@1"));
}

// Qi et al. 2023, ZB-H1: 1F1B's warm-up, then F, BI and (from the (d+1)-th
// step on device d) the oldest pending BW; the held-back BWs close the order.
TEST(PipelineSchedule, ZbH1DefersDWeightGradientsOnDeviceD) {
  const PipelineOrder orders = zb_h1({.devices = 4, .microbatches = 8}, kPath);
  EXPECT_THAT(
      render_all(orders),
      ElementsAre("F0 F1 F2 F3 BI0 BW0 F4 BI1 BW1 F5 BI2 BW2 F6 BI3 BW3 F7 BI4 BW4 "
                  "BI5 BW5 BI6 BW6 BI7 BW7",
                  "F0 F1 F2 BI0 F3 BI1 BW0 F4 BI2 BW1 F5 BI3 BW2 F6 BI4 BW3 F7 BI5 BW4 "
                  "BI6 BW5 BI7 BW6 BW7",
                  "F0 F1 BI0 F2 BI1 F3 BI2 BW0 F4 BI3 BW1 F5 BI4 BW2 F6 BI5 BW3 F7 BI6 BW4 "
                  "BI7 BW5 BW6 BW7",
                  "F0 BI0 F1 BI1 F2 BI2 F3 BI3 BW0 F4 BI4 BW1 F5 BI5 BW2 F6 BI6 BW3 F7 BI7 BW4 "
                  "BW5 BW6 BW7"));
  expect_own_stage(orders);
}

TEST(PipelineSchedule, OneDeviceAlternatesForwardAndBackward) {
  EXPECT_THAT(render_all(one_f_one_b({.devices = 1, .microbatches = 3}, kPath)),
              ElementsAre("F0 B0 F1 B1 F2 B2"));
  EXPECT_THAT(render_all(zb_h1({.devices = 1, .microbatches = 2}, kPath)),
              ElementsAre("F0 BI0 BW0 F1 BI1 BW1"));
}

TEST(PipelineSchedule, PipelineOrderDispatchesBySchedule) {
  const PipelineShape shape{.devices = 4, .microbatches = 8};
  EXPECT_EQ(pipeline_order("gpipe", shape, kPath), gpipe(shape, kPath));
  EXPECT_EQ(pipeline_order("1f1b", shape, kPath), one_f_one_b(shape, kPath));
  EXPECT_EQ(pipeline_order("zb-h1", shape, kPath), zb_h1(shape, kPath));
  EXPECT_EQ(pipeline_order("dualpipe", shape, kPath), dualpipe(shape, kPath));
  EXPECT_EQ(pipeline_order("dualpipev", shape, kPath), dualpipev(shape, kPath));
  const PipelineShape chunked{.devices = 4, .microbatches = 8, .chunks = 2};
  EXPECT_EQ(pipeline_order("interleaved", chunked, kPath), interleaved(chunked, kPath));
}

TEST(PipelineSchedule, InterleavedNeedsMicrobatchesDivisibleByDevices) {
  EXPECT_EQ(error_of("interleaved", {.devices = 4, .microbatches = 6, .chunks = 2}),
            "s.json: $.directives[2].num_microbatches: schedule \"interleaved\" needs a multiple "
            "of the 4 pipeline devices, got 6");
}

TEST(PipelineSchedule, InterleavedNeedsTwoChunks) {
  EXPECT_EQ(error_of("interleaved", {.devices = 4, .microbatches = 8, .chunks = 1}),
            "s.json: $.directives[2].chunks: schedule \"interleaved\" needs at least 2 chunks "
            "per device, got 1; with one chunk use \"1f1b\"");
}

TEST(PipelineSchedule, OnlyInterleavedTakesChunks) {
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"}) {
    EXPECT_EQ(error_of(schedule, {.devices = 4, .microbatches = 8, .chunks = 2}),
              std::string("s.json: $.directives[2].chunks: schedule \"") + schedule +
                  "\" runs one chunk per device, got 2; more chunks need schedule "
                  "\"interleaved\"");
  }
}

TEST(PipelineSchedule, NeedsADeviceAndAMicrobatch) {
  EXPECT_EQ(error_of("1f1b", {.devices = 0, .microbatches = 8}),
            "s.json: $.directives[2].devices: a pipeline needs at least one device, got 0");
  EXPECT_EQ(error_of("gpipe", {.devices = 4, .microbatches = 0}),
            "s.json: $.directives[2].num_microbatches: a pipeline needs at least one "
            "microbatch, got 0");
}

// "F3@0+B1@3 BI2@0": DualPipe's notation of tests/unit/data/dualpipe_reference.py, a pair's
// slots joined by '+'.
std::string render_pairs(const DeviceOrder& order) {
  std::string text;
  for (const Slot& slot : order) {
    if (!text.empty()) text += slot.with_previous ? '+' : ' ';
    text += ir::to_string(slot.pass) + std::to_string(slot.microbatch) + "@" +
            std::to_string(slot.stage);
  }
  return text;
}

// Golden orders from independent models of deepseek-ai/DualPipe's DualPipe.step (commit
// bb214e82) and DualPipeV.step, one line per device: "dualpipe P M DEVICE: F0@0 F1@0 ...".
TEST(PipelineSchedule, DualPipeAndDualPipeVRunUpstreamStepOnEveryDevice) {
  std::ifstream golden(PIPER_SOURCE_DIR "/tests/unit/data/dualpipe_orders.txt");
  ASSERT_TRUE(golden) << "tests/unit/data/dualpipe_orders.txt is missing";
  std::set<std::tuple<std::string, int64_t, int64_t>> shapes;
  std::string line;
  while (std::getline(golden, line)) {
    std::istringstream fields(line);
    std::string schedule;
    int64_t devices = 0, microbatches = 0, device = 0;
    char colon = 0;
    fields >> schedule >> devices >> microbatches >> device >> colon;
    std::string want;
    std::getline(fields >> std::ws, want);
    const PipelineOrder orders =
        pipeline_order(schedule, {.devices = devices, .microbatches = microbatches}, kPath);
    EXPECT_EQ(render_pairs(orders.at(device)), want) << line;
    shapes.insert({schedule, devices, microbatches});
  }
  EXPECT_EQ(shapes, (std::set<std::tuple<std::string, int64_t, int64_t>>{{"dualpipe", 2, 4},
                                                                         {"dualpipe", 4, 8},
                                                                         {"dualpipe", 4, 10},
                                                                         {"dualpipe", 8, 16},
                                                                         {"dualpipe", 8, 20},
                                                                         {"dualpipev", 1, 2},
                                                                         {"dualpipev", 2, 8},
                                                                         {"dualpipev", 4, 10},
                                                                         {"dualpipev", 4, 16}}));
}

// Device d holds stage d of direction 0 and stage p-1-d of direction 1, every microbatch of
// each once per pass.
TEST(PipelineSchedule, DualPipeRunsBothDirectionsOfItsTwoStages) {
  const PipelineOrder orders = dualpipe({.devices = 4, .microbatches = 8}, kPath);
  for (int64_t device = 0; device < 4; ++device) {
    std::map<std::pair<int64_t, ir::Pass>, int> count;
    for (const Slot& slot : orders[device]) {
      EXPECT_EQ(slot.stage, slot.direction == 0 ? device : 3 - device) << to_string(slot);
      ++count[{slot.direction,
               slot.pass == ir::Pass::kBackwardInput ? ir::Pass::kBackward : slot.pass}];
    }
    for (int64_t direction : {0, 1}) {
      EXPECT_EQ((count[{direction, ir::Pass::kForward}]), 4);
      EXPECT_EQ((count[{direction, ir::Pass::kBackward}]), 4);
    }
  }
}

TEST(PipelineSchedule, DualPipeNeedsAnEvenNumberOfDevices) {
  EXPECT_EQ(error_of("dualpipe", {.devices = 3, .microbatches = 12}),
            "s.json: $.directives[2].devices: schedule \"dualpipe\" needs an even number of "
            "devices (at least 2), got 3");
}

TEST(PipelineSchedule, DualPipeNeedsTwiceAsManyMicrobatchesAsDevices) {
  for (int64_t microbatches : {6, 9}) {
    EXPECT_EQ(error_of("dualpipe", {.devices = 4, .microbatches = microbatches}),
              "s.json: $.directives[2].num_microbatches: schedule \"dualpipe\" needs an even "
              "number of microbatches, at least twice the 4 devices (8; half of them enter at "
              "each end), got " +
                  std::to_string(microbatches));
  }
}

// Device d of the V holds stages d and 2p-1-d; every microbatch passes each once per pass.
TEST(PipelineSchedule, DualPipeVHoldsTwoStagesInAV) {
  const PipelineOrder orders = dualpipev({.devices = 2, .microbatches = 8}, kPath);
  for (int64_t device = 0; device < 2; ++device) {
    std::map<std::pair<int64_t, ir::Pass>, int> count;
    for (const Slot& slot : orders[device]) {
      EXPECT_TRUE(slot.stage == device || slot.stage == 3 - device) << to_string(slot);
      ++count[{slot.stage,
               slot.pass == ir::Pass::kBackwardInput ? ir::Pass::kBackward : slot.pass}];
    }
    for (int64_t stage : {device, 3 - device}) {
      EXPECT_EQ((count[{stage, ir::Pass::kForward}]), 8);
      EXPECT_EQ((count[{stage, ir::Pass::kBackward}]), 8);
    }
  }
}

TEST(PipelineSchedule, DualPipeVNeedsAMicrobatchPerStage) {
  EXPECT_EQ(error_of("dualpipev", {.devices = 4, .microbatches = 7}),
            "s.json: $.directives[2].num_microbatches: schedule \"dualpipev\" needs at least as "
            "many microbatches as its 8 stages (2 per device), got 7");
}

TEST(PipelineSchedule, DualPipeImpliesItsChunks) {
  EXPECT_EQ(error_of("dualpipe", {.devices = 4, .microbatches = 8, .chunks = 2}),
            "s.json: $.directives[2].chunks: schedule \"dualpipe\" holds two stages per device "
            "by itself; leave \"chunks\" out, got 2");
  EXPECT_EQ(dualpipev({.devices = 2, .microbatches = 8, .chunks = 2}, kPath),
            dualpipev({.devices = 2, .microbatches = 8}, kPath));
}

}  // namespace
}  // namespace piper::planner::schedule
