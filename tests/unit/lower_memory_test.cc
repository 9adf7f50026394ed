// The lowered plan's memory: reshapes of activations move no data.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace piper
