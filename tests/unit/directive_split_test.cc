#include <gtest/gtest.h>

#include <cstring>

#include "directive_fixture.h"
#include "formats/error.h"

namespace piper {
namespace {

using testing::apply_directives;
using testing::two_layer_task_graph;

TEST(SplitDirective, ClonesForwardAndBackwardPerMicrobatchButNotTheUpdate) {
  ir::TaskGraph graph = two_layer_task_graph(2, R"({"type": "sgd"})");
  const int before = graph.num_tasks();
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 4}])");
  std::map<std::pair<ir::Pass, int>, int> count;
  for (const ir::Task& task : graph.tasks()) ++count[{task.pass, task.microbatch}];
  EXPECT_EQ(graph.num_tasks(), before + 3 * 2);  // one F and one B task, three more copies each
  for (int mb = 0; mb < 4; ++mb) {
    EXPECT_EQ((count[{ir::Pass::kForward, mb}]), 1) << mb;
    EXPECT_EQ((count[{ir::Pass::kBackward, mb}]), 1) << mb;
  }
  EXPECT_EQ((count[{ir::Pass::kUpdate, 0}]), 1);
}

TEST(SplitDirective, GradientsAccumulateAndTheSeedIsOneOverM) {
  ir::TaskGraph graph = two_layer_task_graph(2, R"({"type": "sgd"})");
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 4}])");
  const ir::OpGraph& ops = graph.op_graph();
  for (const ir::TrainedParameter& trained : ops.trained) {
    EXPECT_TRUE(ops.tensor(trained.gradient).accumulated);
    EXPECT_EQ(ops.op(ops.producer(trained.gradient)).type, "piper.Accumulate");
    EXPECT_FALSE(ir::is_per_microbatch(ops, trained.gradient));
  }
  float seed = 0;
  std::memcpy(&seed, ops.tensor(ops.loss_seed).data.data(), sizeof(float));
  EXPECT_FLOAT_EQ(seed, 0.25f);
}

TEST(SplitDirective, OneMicrobatchChangesNothing) {
  ir::TaskGraph graph = two_layer_task_graph(8, R"({"type": "sgd"})");
  const int before = graph.num_tasks();
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 1}])");
  EXPECT_EQ(graph.num_tasks(), before);
}

TEST(SplitDirective, MustComeBeforeTransfers) {
  ir::TaskGraph graph = two_layer_task_graph(4, R"({"type": "sgd"})");
  apply_directives(graph, R"([{"op": "zero", "stage": 0, "devices": [0, 1]}])");
  try {
    apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2}])");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("$.directives[0]"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace piper
