// The lowered plan's memory: reshapes of activations move no data.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "formats/strategy.h"
#include "planner/plan_model.h"

namespace piper {
namespace {

plan::Plan gpt_plan(const std::string& strategy_text) {
  const strategy::Strategy strategy =
      strategy::parse_strategy(strategy_text, "lower_memory_test.json");
  return planner::plan_model(PIPER_SOURCE_DIR "/samples/gpt/model.onnx", strategy, {}).plans.at(0);
}

TEST(LowerMemory, ReshapedActivationsShareTheirInputsBuffer) {
  const plan::Plan plan = gpt_plan(
      R"({"batch": {"global": 4}, "frozen": ["*mask*"],
          "directives": [{"op": "split", "dim_name": "MB", "num_microbatches": 2}]})");
  int shared = 0, inputs = 0;
  for (const plan::Stream& stream : plan.streams()) {
    for (const plan::Instruction& instruction : stream.instructions()) {
      const plan::Kernel& kernel = instruction.kernel();
      if (kernel.op_type() != "Reshape") continue;
      const plan::Tensor& x = plan.tensors(kernel.inputs(0));
      const plan::Tensor& y = plan.tensors(kernel.outputs(0));
      if (x.role() == plan::ACTIVATION && y.role() == plan::ACTIVATION) {
        EXPECT_EQ(x.offset(), y.offset()) << x.name() << " -> " << y.name();
        shared += x.offset() == y.offset();
      } else if (x.role() == plan::INPUT) {
        // A batch input is fed before the step, not written by a kernel: it keeps its bytes.
        EXPECT_NE(x.offset(), y.offset()) << x.name();
        ++inputs;
      }
    }
  }
  // Per microbatch and layer: the q, k, v head splits, the head merge and their gradients.
  EXPECT_GE(shared, 2 * 2 * 8);
  EXPECT_EQ(inputs, 2);  // the targets, flattened for the loss, per microbatch
}

// The byte ranges of the tensors the instructions of (stream, pass, microbatch) touch.
std::vector<std::pair<uint64_t, uint64_t>> ranges_of(const plan::Plan& plan,
                                                     const std::string& stream_name,
                                                     plan::Pass pass, int microbatch) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const plan::Stream& stream : plan.streams()) {
    if (stream.name() != stream_name) continue;
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (instruction.pass() != pass || instruction.microbatch() != microbatch) continue;
      for (const auto* list : {&instruction.kernel().inputs(), &instruction.kernel().outputs()}) {
        for (int index : *list) {
          if (index < 0) continue;
          const plan::Tensor& tensor = plan.tensors(index);
          if (tensor.role() != plan::ACTIVATION || tensor.bytes() == 0) continue;
          ranges.emplace_back(tensor.offset(), tensor.offset() + tensor.bytes());
        }
      }
    }
  }
  return ranges;
}

// samples/gpt under DualPipe on 2 devices, one block a stage.
const char* kDualPipe = R"({"batch": {"global": 8}, "frozen": ["*mask*"],
    "annotations": [{"match": "/blocks.0/*", "tags": {"PP": 0}},
                    {"match": "/blocks.1/*", "tags": {"PP": 1}}],
    "directives": [{"op": "pipeline", "schedule": "dualpipe", "devices": [0, 1],
                    "num_microbatches": 4}]})";

// DualPipe on 2 devices pairs device 0's forward of microbatch 1 on stage 1 (stream compute2)
// with its backward of microbatch 0 on stage 0 (compute): the two run at once, so no
// activation of one may take bytes of the other's.
TEST(LowerMemory, OverlappedPairsKeepTheirBuffersApart) {
  const plan::Plan plan = gpt_plan(kDualPipe);
  const auto forward = ranges_of(plan, "compute2", plan::FORWARD, 1);
  const auto backward = ranges_of(plan, "compute", plan::BACKWARD, 0);
  ASSERT_FALSE(forward.empty());
  ASSERT_FALSE(backward.empty());
  for (const auto& [f_begin, f_end] : forward) {
    for (const auto& [b_begin, b_end] : backward) {
      const bool same = f_begin == b_begin && f_end == b_end;  // a tensor both touch
      EXPECT_TRUE(same || f_end <= b_begin || b_end <= f_begin)
          << "[" << f_begin << ", " << f_end << ") and [" << b_begin << ", " << b_end << ")";
    }
  }
}

// A send's buffer is reused once the send is done, and the task that reuses it waits for that.
// In an overlapped pair that task is on the stream that wrote what was sent: the partner on the
// other compute stream does not wait for a send, which would hold it until the peer receives.
TEST(LowerMemory, OnlyTheWritersStreamWaitsForASend) {
  const plan::Plan plan = gpt_plan(kDualPipe);
  std::map<int, std::string> recorder;                // event -> the stream that records it
  std::map<int, std::set<std::string>> send_writers;  // a send's event -> its writers' streams
  for (const plan::Stream& stream : plan.streams()) {
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (instruction.has_record()) recorder[instruction.record().event()] = stream.name();
    }
  }
  for (const plan::Stream& stream : plan.streams()) {
    std::set<std::string> writers;  // the streams the stream's next send waits for
    bool sent = false;
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (instruction.has_wait()) writers.insert(recorder.at(instruction.wait().event()));
      if (instruction.has_send()) sent = true;
      if (instruction.has_record() && sent) send_writers[instruction.record().event()] = writers;
      if (instruction.has_record()) {
        writers.clear();
        sent = false;
      }
    }
  }
  ASSERT_FALSE(send_writers.empty());
  int waits = 0;
  for (const plan::Stream& stream : plan.streams()) {
    if (stream.name().rfind("compute", 0) != 0) continue;
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (!instruction.has_wait()) continue;
      const auto send = send_writers.find(instruction.wait().event());
      if (send == send_writers.end()) continue;
      ++waits;
      EXPECT_TRUE(send->second.count(stream.name()))
          << stream.name() << " waits for the send of event " << send->first << " ("
          << instruction.label() << ", mb " << instruction.microbatch() << ")";
    }
  }
  EXPECT_GT(waits, 0);
}

}  // namespace
}  // namespace piper
