// The communication report (formats/comm_volume.h): a hand-built plan's volume by kind and
// scope, and planned plans: data parallelism all-reduces the gradients, tensor parallelism
// reshards inside compute tasks.
#include "formats/comm_volume.h"

#include <gtest/gtest.h>

#include "formats/error.h"
#include "formats/strategy.h"
#include "planner/plan_model.h"

namespace piper::formats {
namespace {

int add_tensor(plan::Plan& plan, uint64_t bytes) {
  plan.add_tensors()->set_bytes(bytes);
  return plan.tensors_size() - 1;
}

void add_group(plan::Plan& plan, int id, std::vector<int> ranks) {
  plan::CommGroup& group = *plan.add_groups();
  group.set_id(id);
  for (int rank : ranks) group.add_ranks(rank);
}

plan::Collective& add_collective(plan::Stream& stream, int task, plan::Collective::Kind kind,
                                 int group, std::vector<int> inputs, std::vector<int> outputs) {
  plan::Instruction& instruction = *stream.add_instructions();
  instruction.set_task(task);
  plan::Collective& collective = *instruction.mutable_collective();
  collective.set_kind(kind);
  collective.set_group(group);
  for (int in : inputs) collective.add_inputs(in);
  for (int out : outputs) collective.add_outputs(out);
  return collective;
}

// Rank 0 of 4: a compute task (7) whose reshards are an all-reduce and an all-gather over
// the tensor-parallel group {0, 1}; a gradient all-reduce task over all four ranks, a
// reduce-scatter task, a broadcast from rank 2, a send and a recv.
plan::Plan small_plan() {
  plan::Plan plan;
  plan.mutable_header()->set_rank(0);
  add_group(plan, 0, {0, 1, 2, 3});
  add_group(plan, 1, {0, 1});
  const int whole = add_tensor(plan, 1024);
  const int quarter = add_tensor(plan, 256);
  const int half = add_tensor(plan, 512);
  const int grad_a = add_tensor(plan, 400);
  const int grad_b = add_tensor(plan, 600);
  plan::Stream& compute = *plan.add_streams();
  compute.set_name("compute");
  plan::Instruction& kernel = *compute.add_instructions();
  kernel.set_task(7);
  kernel.mutable_kernel()->set_op_type("MatMul");
  add_collective(compute, 7, plan::Collective::ALL_REDUCE, 1, {whole}, {whole});
  add_collective(compute, 7, plan::Collective::ALL_GATHER, 1, {half}, {whole});
  plan::Stream& comm = *plan.add_streams();
  comm.set_name("comm");
  add_collective(comm, 9, plan::Collective::ALL_REDUCE, 0, {grad_a, grad_b}, {grad_a, grad_b});
  add_collective(comm, 10, plan::Collective::REDUCE_SCATTER, 0, {whole}, {quarter});
  add_collective(comm, 11, plan::Collective::BROADCAST, 0, {half}, {half}).set_root(2);
  plan::Stream& p2p = *plan.add_streams();
  p2p.set_name("p2p_0_to_1");
  plan::Instruction& send = *p2p.add_instructions();
  send.set_task(12);
  send.mutable_send()->set_tensor(quarter);
  plan::Instruction& recv = *p2p.add_instructions();
  recv.set_task(13);
  recv.mutable_recv()->set_tensor(half);
  return plan;
}

// Expert parallelism's all-to-alls run as tasks of their own (planner/expert_exchanges.h), on
// an exchange stream: still reshards.
TEST(CommVolume, CountsALoneAllToAllAsAReshard) {
  plan::Plan plan;
  plan.mutable_header()->set_rank(0);
  add_group(plan, 0, {0, 1});
  const int rows = add_tensor(plan, 512);
  const int blocks = add_tensor(plan, 512);
  plan::Stream& exchange = *plan.add_streams();
  exchange.set_name("a2a_compute");
  add_collective(exchange, 5, plan::Collective::ALL_TO_ALL, 0, {rows}, {blocks});
  add_collective(exchange, 6, plan::Collective::ALL_TO_ALL_V, 0, {rows}, {blocks});
  const CommVolume volume = comm_volume(plan);
  EXPECT_EQ(volume.at(CommScope::kReshard, CommKind::kAllToAll).count, 2);
  EXPECT_EQ(volume.at(CommScope::kTask, CommKind::kAllToAll).count, 0);
}

TEST(CommVolume, CountsEachKindInItsScopeWithWhatARingSends) {
  const CommVolume volume = comm_volume(small_plan());
  const CommTotal& reshard_reduce = volume.at(CommScope::kReshard, CommKind::kAllReduce);
  EXPECT_EQ(reshard_reduce.count, 1);
  EXPECT_EQ(reshard_reduce.bytes, 1024u);
  EXPECT_DOUBLE_EQ(reshard_reduce.sent_bytes, 1024.0);  // 2(n-1)/n with n = 2
  const CommTotal& gather = volume.at(CommScope::kReshard, CommKind::kAllGather);
  EXPECT_EQ(gather.bytes, 1024u);  // the gathered output
  EXPECT_DOUBLE_EQ(gather.sent_bytes, 512.0);
  const CommTotal& gradients = volume.at(CommScope::kTask, CommKind::kAllReduce);
  EXPECT_EQ(gradients.count, 1);
  EXPECT_EQ(gradients.bytes, 1000u);
  EXPECT_DOUBLE_EQ(gradients.sent_bytes, 1500.0);  // 2 * 3/4
  const CommTotal& scatter = volume.at(CommScope::kTask, CommKind::kReduceScatter);
  EXPECT_EQ(scatter.bytes, 1024u);  // the whole input
  EXPECT_DOUBLE_EQ(scatter.sent_bytes, 768.0);
  const CommTotal& broadcast = volume.at(CommScope::kTask, CommKind::kBroadcast);
  EXPECT_EQ(broadcast.bytes, 512u);
  EXPECT_DOUBLE_EQ(broadcast.sent_bytes, 0.0);  // rank 0 receives it from rank 2
  EXPECT_EQ(volume.at(CommScope::kTask, CommKind::kSend).bytes, 256u);
  EXPECT_DOUBLE_EQ(volume.at(CommScope::kTask, CommKind::kSend).sent_bytes, 256.0);
  EXPECT_EQ(volume.at(CommScope::kTask, CommKind::kRecv).bytes, 512u);
  EXPECT_DOUBLE_EQ(volume.at(CommScope::kTask, CommKind::kRecv).sent_bytes, 0.0);
  EXPECT_EQ(volume.at(CommScope::kReshard, CommKind::kReduceScatter).count, 0);
  EXPECT_EQ(volume.at(CommScope::kTask, CommKind::kAllGather).count, 0);

  const std::string line = comm_volume_line(volume);
  EXPECT_NE(line.find("tensor/expert-parallel all-reduce 1024 B (1.00 KiB) in 1"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("data-parallel all-reduce 1000 B"), std::string::npos) << line;
  EXPECT_NE(line.find("; send 256 B"), std::string::npos) << line;
  EXPECT_EQ(comm_volume_line(CommVolume{}), "none");
  const std::string table = comm_volume_table(volume);
  EXPECT_NE(table.find("data-parallel reduce-scatter"), std::string::npos) << table;
  EXPECT_NE(table.find("768"), std::string::npos) << table;
}

TEST(CommVolume, NamesTheInstructionOfAMissingTensorOrGroup) {
  plan::Plan plan = small_plan();
  plan.mutable_streams(1)->mutable_instructions(0)->mutable_collective()->set_inputs(0, 99);
  try {
    comm_volume(plan);
    FAIL() << "a dangling tensor was counted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("stream 'comm', instruction 0 names tensor 99"),
              std::string::npos)
        << error.what();
  }
  plan = small_plan();
  plan.mutable_streams(0)->mutable_instructions(1)->mutable_collective()->set_group(5);
  EXPECT_THROW(comm_volume(plan), Error);
}

std::vector<plan::Plan> gpt_plans(const std::string& strategy_text) {
  const strategy::Strategy strategy = strategy::parse_strategy(strategy_text, "comm_test.json");
  return planner::plan_model(PIPER_SOURCE_DIR "/samples/gpt/model.onnx", strategy, {}).plans;
}

TEST(CommVolume, DataParallelAllReducesTheGradientsTheLossAndTheNormsSquares) {
  const auto plans = gpt_plans(
      R"({"batch": {"global": 8}, "frozen": ["*mask*"],
          "directives": [{"op": "replicate", "devices": [0, 1]}]})");
  for (const plan::Plan& plan : plans) {
    const CommVolume volume = comm_volume(plan);
    const CommTotal& reduce = volume.at(CommScope::kTask, CommKind::kAllReduce);
    // One bucket of every float32 gradient, and two float32 scalars: the loss (averaged for
    // the report) and the gradient norm's sum of squares.
    EXPECT_EQ(reduce.count, 3);
    EXPECT_EQ(reduce.bytes, plan.memory().gradient_bytes() + 2 * 4);
    EXPECT_DOUBLE_EQ(reduce.sent_bytes, static_cast<double>(reduce.bytes));  // 2 * 1/2
    for (const auto& kinds : volume.totals[0]) EXPECT_EQ(kinds.count, 0);
  }
}

TEST(CommVolume, TensorParallelReshardsCountApartFromDataParallelTasks) {
  const auto plans = gpt_plans(
      R"({"batch": {"global": 8}, "frozen": ["*mask*"], "mesh": [["dp", 2], ["tp", 2]],
          "directives": [{"op": "replicate", "axis": "dp"},
            {"op": "shard", "axis": "tp", "params": {
              "blocks.*.attn.q.*": 0, "blocks.*.attn.k.weight": 0, "blocks.*.attn.v.*": 0,
              "blocks.*.attn.proj.weight": 1, "blocks.*.mlp.fc.*": 0,
              "blocks.*.mlp.out.weight": 1}}]})");
  ASSERT_EQ(plans.size(), 4u);
  const CommVolume first = comm_volume(plans[0]);
  EXPECT_GT(first.at(CommScope::kReshard, CommKind::kAllReduce).count, 0);
  EXPECT_GT(first.at(CommScope::kTask, CommKind::kAllReduce).bytes, 0u);
  for (const plan::Plan& plan : plans) {
    const CommVolume volume = comm_volume(plan);
    // Every rank runs its group's share of the same layers: the same volume.
    EXPECT_EQ(volume.at(CommScope::kReshard, CommKind::kAllReduce).bytes,
              first.at(CommScope::kReshard, CommKind::kAllReduce).bytes);
  }
}

}  // namespace
}  // namespace piper::formats
