#include <gtest/gtest.h>

#include <algorithm>

#include "directive_fixture.h"
#include "formats/error.h"
#include "planner/expert_exchanges.h"
#include "planner/ir/text.h"
#include "planner/lower/lower.h"
#include "planner/sim/overlapped_pairs.h"

namespace piper {
namespace {

// Tokens already dispatched to 2 experts with capacity 2, x [B, E, C, d], through two batched
// expert weights w1 [E, d, f] and w2 [E, f, h] with a ReLU between, then summed into class
// scores: GShard's expert layer. With `dense`, the scores then pass a dense MLP (wa [3, 6],
// ReLU, wb [6, 3]) that tensor parallelism splits; with `bias`, each expert adds its bias
// b2 [E, 1, h] to its outputs.
ir::TaskGraph expert_task_graph(int64_t batch, bool dense = false, bool bias = false) {
  testing::OnnxBuilder b;
  b.input("x", {-1, 2, 2, 4}).input("y", {-1}, onnx::TensorProto::INT64).output("loss", {});
  b.initializer("w1", {2, 4, 5}, std::vector<float>(40, 0.1f));
  b.initializer("w2", {2, 5, 3}, std::vector<float>(30, 0.2f));
  testing::OnnxBuilder::attr(b.node("Einsum", {"x", "w1"}, {"h"}, "/experts/fc1"), "equation",
                             std::string("becd,edf->becf"));
  b.node("Relu", {"h"}, {"r"}, "/experts/relu");
  testing::OnnxBuilder::attr(b.node("Einsum", {"r", "w2"}, {bias ? "p" : "o"}, "/experts/fc2"),
                             "equation", std::string("becf,efh->bech"));
  if (bias) {
    b.initializer("b2", {2, 1, 3}, std::vector<float>(6, 0.5f));
    b.node("Add", {"p", "b2"}, {"o"}, "/experts/bias");
  }
  testing::OnnxBuilder::attr(b.node("Einsum", {"o"}, {"z"}, "/combine"), "equation",
                             std::string("bech->bh"));
  if (dense) {
    b.initializer("wa", {3, 6}, std::vector<float>(18, 0.3f));
    b.initializer("wb", {6, 3}, std::vector<float>(18, 0.4f));
    b.node("MatMul", {"z", "wa"}, {"a"}, "/dense/fc1");
    b.node("Relu", {"a"}, {"g"}, "/dense/relu");
    b.node("MatMul", {"g", "wb"}, {"scores"}, "/dense/fc2");
  }
  b.node("SoftmaxCrossEntropyLoss", {dense ? "scores" : "z", "y"}, {"loss"}, "/loss");
  ir::OpGraph graph = planner::import_model(b.model(), {.batch = batch}, "experts.onnx");
  const auto strategy = strategy::parse_strategy(
      R"({"batch": {"global": 8}, "optimizer": {"type": "sgd"}})", "test.json");
  planner::differentiate(graph);
  planner::add_optimizer(graph, strategy.optimizer);
  return ir::build_task_graph(std::move(graph));
}

const char* kExpertParallel = R"([
    {"op": "replicate", "devices": [0, 1]},
    {"op": "shard", "devices": [0, 1], "params": {"w*": 0}}])";

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

int count(const ir::OpGraph& ops, const std::string& type, ir::Pass pass) {
  return static_cast<int>(std::count_if(ops.ops().begin(), ops.ops().end(), [&](const ir::Op& op) {
    return op.type == type && op.pass == pass;
  }));
}

TEST(ExpertParallel, TokensTravelToTheirExpertsAndBack) {
  ir::TaskGraph graph = expert_task_graph(4);
  testing::apply_directives(graph, kExpertParallel);
  const std::string text = ir::print(graph);
  // Each replica keeps one expert; its rows of the batch stay its own.
  EXPECT_TRUE(has_line(text, "tensor w1 f32[1,4,5] parameter init=w1 placement=S(0) over=replicas"))
      << text;
  EXPECT_TRUE(has_line(text, "tensor r f32[8,1,2,5] activation placement=S(1) over=replicas"))
      << text;
  const ir::OpGraph& ops = graph.op_graph();
  EXPECT_EQ(ops.replica_group, 2);
  // Rows to experts before the experts, experts to rows after; the backward sends the scores'
  // gradient to the experts (w1's gradient reads the forward's exchange of x).
  EXPECT_EQ(count(ops, "piper.AllToAll", ir::Pass::kForward), 2) << text;
  EXPECT_EQ(count(ops, "piper.AllToAll", ir::Pass::kBackward), 1) << text;
  for (const char* reduction : {"piper.AllReduce", "piper.AllGather", "piper.ReduceScatter"}) {
    EXPECT_EQ(count(ops, reduction, ir::Pass::kForward), 0) << reduction;
    EXPECT_EQ(count(ops, reduction, ir::Pass::kBackward), 0) << reduction;
  }
  // The expert gradients are the replica's own blocks, in no data-parallel reduction.
  for (const ir::TrainedParameter& trained : ops.trained) {
    EXPECT_EQ(ops.tensor(trained.gradient).placement, ir::Placement::sharded(0));
    for (const ir::Task& task : graph.tasks()) {
      if (task.kind == ir::TaskKind::kCompute) continue;
      EXPECT_EQ(std::count(task.tensors.begin(), task.tensors.end(), trained.gradient), 0)
          << ir::to_string(task.kind);
    }
  }
}

TEST(ExpertParallel, LowersEachReplicasExpertsAndExchangesOverTheReplicas) {
  ir::TaskGraph graph = expert_task_graph(4);
  testing::apply_directives(graph, kExpertParallel);
  for (int rank = 0; rank < 2; ++rank) {
    const plan::Plan plan = planner::lower(graph, rank, {});
    ASSERT_EQ(plan.parameters_size(), 2);
    for (const plan::ParameterLoad& load : plan.parameters()) {
      EXPECT_EQ(load.block().start(), rank) << load.initializer();
      EXPECT_EQ(load.block().size(), 1) << load.initializer();
    }
    int exchanges = 0;
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        if (!instruction.has_collective() ||
            instruction.collective().kind() != plan::Collective::ALL_TO_ALL) {
          continue;
        }
        ++exchanges;
        const auto group = std::find_if(
            plan.groups().begin(), plan.groups().end(),
            [&](const plan::CommGroup& g) { return g.id() == instruction.collective().group(); });
        ASSERT_NE(group, plan.groups().end());
        EXPECT_EQ(std::vector<int>(group->ranks().begin(), group->ranks().end()),
                  (std::vector<int>{0, 1}));
      }
    }
    EXPECT_EQ(exchanges, 3);
  }
}

// Each exchange is a task of its own on the exchange stream of its compute stream, between
// the parts of the task it was cut from; lowered, it waits for the ops before it and the ops
// after it wait for it.
TEST(ExpertParallel, ExchangesRunAsTasksOnTheirOwnStream) {
  ir::TaskGraph graph = expert_task_graph(4);
  testing::apply_directives(graph, kExpertParallel);
  const int before = graph.num_tasks();
  EXPECT_EQ(planner::separate_expert_exchanges(graph), 3);
  ir::verify_or_throw(graph, "after separating the expert exchanges");
  EXPECT_EQ(planner::exchange_stream("compute"), "a2a_compute");
  const std::string text = ir::print(graph);
  const ir::OpGraph& ops = graph.op_graph();
  int exchanges = 0;
  for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
    const ir::Task& task = graph.task(id);
    const bool exchange = task.ops.size() == 1 && ops.op(task.ops[0]).type == "piper.AllToAll";
    if (!exchange) {
      for (ir::OpId op : task.ops) EXPECT_NE(ops.op(op).type, "piper.AllToAll") << text;
      continue;
    }
    ++exchanges;
    EXPECT_GE(id, before);
    const std::string line = "task " + std::to_string(id) + " compute " + ir::to_string(task.pass) +
                             " mb=0 tags={} devices=[0,1] " + "stream=a2a_compute ops=[" +
                             std::to_string(task.ops[0]) + "]";
    EXPECT_TRUE(has_line(text, line)) << line << " in\n" << text;
    // Its parts on the compute stream before and after it, joined by data edges.
    int from_compute = 0, to_compute = 0;
    for (const ir::Edge& edge : graph.edges()) {
      if (edge.kind != ir::EdgeKind::kData) continue;
      if (edge.to == id && graph.task(edge.from).stream == "compute") ++from_compute;
      if (edge.from == id && graph.task(edge.to).stream == "compute") ++to_compute;
    }
    EXPECT_GE(from_compute, 1) << line;
    EXPECT_GE(to_compute, 1) << line;
  }
  EXPECT_EQ(exchanges, 3);
  EXPECT_EQ(ir::print(ir::parse(text)), text);
  for (int rank = 0; rank < 2; ++rank) {
    const plan::Plan plan = planner::lower(graph, rank, {});
    for (const plan::Stream& stream : plan.streams()) {
      const auto& instructions = stream.instructions();
      for (int i = 0; i < instructions.size(); ++i) {
        if (instructions[i].collective().kind() != plan::Collective::ALL_TO_ALL) continue;
        ASSERT_EQ(stream.name(), "a2a_compute") << instructions[i].label();
        ASSERT_TRUE(i > 0 && instructions[i - 1].has_wait()) << instructions[i].label();
        ASSERT_TRUE(i + 1 < instructions.size() && instructions[i + 1].has_record())
            << instructions[i].label();
      }
    }
  }
}

// An exchange goes out as soon as what it reads is written: in the backward, the dense
// layer's weight gradients, which the scores' gradient does not need, follow the exchange of
// that gradient to the experts instead of holding it back.
TEST(ExpertParallel, AnExchangeGoesOutBeforeTheOpsItDoesNotNeed) {
  ir::TaskGraph graph = expert_task_graph(4, /*dense=*/true);
  testing::apply_directives(graph, R"([
      {"op": "replicate", "devices": [0, 1]},
      {"op": "shard", "devices": [0, 1], "params": {"w1": 0, "w2": 0}}])");
  const ir::OpGraph& ops = graph.op_graph();
  const auto weight_gradient = [&](ir::OpId op) {
    for (const ir::TrainedParameter& trained : ops.trained) {
      const std::string& name = ops.tensor(trained.gradient).name;
      if (name.find("wa") == std::string::npos && name.find("wb") == std::string::npos) continue;
      for (ir::TensorId out : ops.op(op).outputs) {
        if (out == trained.gradient) return true;
      }
    }
    return false;
  };
  // Before the cut, the backward computes the dense weights' gradients before its exchange.
  size_t dense_gradients = 0;
  for (const ir::Task& task : graph.tasks()) {
    if (task.kind != ir::TaskKind::kCompute || task.pass != ir::Pass::kBackward) continue;
    const auto exchange = std::find_if(task.ops.begin(), task.ops.end(), [&](ir::OpId op) {
      return ops.op(op).type == "piper.AllToAll";
    });
    ASSERT_NE(exchange, task.ops.end());
    dense_gradients = std::count_if(task.ops.begin(), exchange, weight_gradient);
  }
  EXPECT_EQ(dense_gradients, 2u) << ir::print(graph);
  EXPECT_EQ(planner::separate_expert_exchanges(graph), 3);
  ir::verify_or_throw(graph, "after separating the expert exchanges");
  const std::string text = ir::print(graph);
  // The backward's parts on the compute stream: the one the exchange waits for computes no
  // weight gradient; the dense ones come in a part after it.
  int before = 0, after = 0;
  for (const ir::Edge& edge : graph.edges()) {
    const ir::Task& from = graph.task(edge.from);
    const ir::Task& to = graph.task(edge.to);
    if (from.pass != ir::Pass::kBackward || to.pass != ir::Pass::kBackward) continue;
    if (to.stream == "a2a_compute" && from.stream == "compute") {
      before += std::count_if(from.ops.begin(), from.ops.end(), weight_gradient);
    }
    if (from.stream == "a2a_compute" && to.stream == "compute") {
      after += std::count_if(to.ops.begin(), to.ops.end(), weight_gradient);
    }
  }
  EXPECT_EQ(before, 0) << text;
  EXPECT_EQ(after, 2) << text;
}

// The experts' bias gradient is summed from the rows, then reduce-scattered over the replicas
// (each keeps its expert's block) and scaled to their mean. Nothing in the backward reads it:
// the two ops run last, on the exchange stream, and only the update waits for them, so the
// backward's computation never waits there for a late peer.
TEST(ExpertParallel, ABiasGradientReducedOverTheReplicasRunsAfterTheComputation) {
  ir::TaskGraph graph = expert_task_graph(4, /*dense=*/false, /*bias=*/true);
  testing::apply_directives(graph, kExpertParallel);
  EXPECT_EQ(planner::separate_expert_exchanges(graph), 3);
  ir::verify_or_throw(graph, "after separating the expert exchanges");
  const ir::OpGraph& ops = graph.op_graph();
  const auto op_named = [&](const std::string& name) {
    for (ir::OpId id = 0; id < ops.num_ops(); ++id) {
      if (ops.op(id).name == name) return id;
    }
    return -1;
  };
  const auto task_of = [&](ir::OpId op) {
    for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
      const std::vector<ir::OpId>& held = graph.task(id).ops;
      if (std::find(held.begin(), held.end(), op) != held.end()) return id;
    }
    return -1;
  };
  const ir::OpId scatter = op_named("grad/b2/tp_reduce_scatter");
  const ir::OpId mean = op_named("grad/b2/replica_mean");
  const ir::TaskId tail = task_of(scatter);
  const ir::TaskId last_part = task_of(op_named("grad/w1"));
  const ir::TaskId update = task_of(op_named("optim/b2"));
  const std::string text = ir::print(graph);
  const std::string line = "task " + std::to_string(tail) +
                           " compute B mb=0 tags={} devices=[0,1] stream=a2a_compute ops=[" +
                           std::to_string(scatter) + "," + std::to_string(mean) + "]";
  EXPECT_TRUE(has_line(text, line)) << line << " in\n" << text;
  const std::string after = "edge " + std::to_string(last_part) + " -> " + std::to_string(tail);
  EXPECT_TRUE(has_line(text, after + " data")) << after << " in\n" << text;
  for (const ir::Edge& edge : graph.edges()) {
    if (edge.from != tail) continue;
    EXPECT_EQ(edge.to, update) << text;
    EXPECT_EQ(edge.kind, ir::EdgeKind::kData) << text;
  }
}

TEST(ExpertParallel, RefusesAReplicateOverOtherGroups) {
  ir::TaskGraph graph = expert_task_graph(2);
  try {
    testing::apply_directives(graph, R"([
        {"op": "replicate", "devices": [0, 1]},
        {"op": "replicate", "devices": [0, 1, 2, 3]},
        {"op": "shard", "devices": [0, 1], "params": {"w*": 0}}])");
    ADD_FAILURE() << "planned";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("splits parameters over the 2 replicas"),
              std::string::npos)
        << error.what();
  }
}

// Expert parallelism over dp with tensor parallelism over tp: the dense MLP split Megatron's
// way over each tp group, the experts over each dp group.
const char* kMesh = R"([["dp", 2], ["tp", 2]])";
const char* kReplicate = R"({"op": "replicate", "axis": "dp"})";
const char* kTensorParallel = R"({"op": "shard", "axis": "tp", "params": {"wa": 1, "wb": 0}})";
const char* kExperts = R"({"op": "shard", "axis": "dp", "params": {"w1": 0, "w2": 0}})";

std::string directives(const std::vector<std::string>& list) {
  std::string text = "[";
  for (const std::string& directive : list) text += (text.size() > 1 ? ", " : "") + directive;
  return text + "]";
}

ir::TaskGraph composed_graph(const std::vector<std::string>& list) {
  ir::TaskGraph graph = expert_task_graph(4, true);
  testing::apply_directives(graph, directives(list), 8, kMesh);
  return graph;
}

// The op lines of `text` that name `type`, split by whether they run over the replicas.
std::pair<int, int> count_lines(const std::string& text, const std::string& type) {
  std::pair<int, int> counts;  // (over the replicas, over the tensor-parallel group)
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.rfind("op ", 0) != 0 || line.find(" " + type + " ") == std::string::npos) continue;
    ++(line.find("over=\"replicas\"") != std::string::npos ? counts.first : counts.second);
  }
  return counts;
}

TEST(ExpertAndTensorParallel, EachAxisGetsItsCollectives) {
  const ir::TaskGraph graph = composed_graph({kReplicate, kTensorParallel, kExperts});
  const std::string text = ir::print(graph);
  // The experts are split over the replicas, the dense weights over the tensor-parallel group;
  // each is whole along the other axis.
  EXPECT_TRUE(has_line(text, "tensor w1 f32[1,4,5] parameter init=w1 placement=S(0) over=replicas"))
      << text;
  EXPECT_TRUE(has_line(text, "tensor wa f32[3,3] parameter init=wa placement=S(1)")) << text;
  EXPECT_TRUE(has_line(text, "tensor wb f32[3,3] parameter init=wb placement=S(0)")) << text;
  EXPECT_TRUE(has_line(text, "tensor g f32[4,3] activation placement=S(1)")) << text;
  EXPECT_TRUE(has_line(text, "shard_groups [0,1] [2,3]")) << text;
  EXPECT_EQ(graph.op_graph().replica_group, 2);
  // Tokens travel to their experts and back by all-to-all over the replicas (two forward,
  // one backward); the dense MLP's partial product and its input's gradient are all-reduced
  // over the tp group.
  EXPECT_EQ(count_lines(text, "piper.AllToAll"), std::make_pair(3, 0)) << text;
  EXPECT_EQ(count_lines(text, "piper.AllReduce"), std::make_pair(0, 2)) << text;
  EXPECT_TRUE(ir::verify(graph).empty());
}

// An expert weight read as split over the tensor-parallel group (its mark over the replicas
// lost) breaks the tp group's placements at its einsum, and one left whole over the replicas
// breaks the replicas' at its update, which reads the gradient's block.
TEST(ExpertAndTensorParallel, VerifyChecksEachAxisApart) {
  for (const bool over_replicas : {false, true}) {
    ir::TaskGraph graph = composed_graph({kReplicate, kTensorParallel, kExperts});
    ir::Tensor& w1 = graph.op_graph().tensor(*graph.op_graph().find_tensor("w1"));
    if (over_replicas) {
      w1.placement = ir::Placement{};
    } else {
      w1.placed_over_replicas = false;
    }
    const std::vector<std::string> messages = ir::verify(graph);
    const std::string expected = over_replicas ? "(piper.SGD \"optim/w1\") reads 'grad/w1'"
                                               : "(Einsum \"/experts/fc1\") writes 'h'";
    EXPECT_TRUE(std::any_of(messages.begin(), messages.end(), [&](const std::string& message) {
      return message.find(expected) != std::string::npos;
    })) << (messages.empty() ? "verified" : messages.front());
  }
}

TEST(ExpertAndTensorParallel, PlansTheSameInEitherOrder) {
  EXPECT_EQ(ir::print(composed_graph({kReplicate, kTensorParallel, kExperts})),
            ir::print(composed_graph({kExperts, kReplicate, kTensorParallel})));
}

std::vector<int> group_ranks(const plan::Plan& plan, int id) {
  const auto group = std::find_if(plan.groups().begin(), plan.groups().end(),
                                  [&](const plan::CommGroup& g) { return g.id() == id; });
  if (group == plan.groups().end()) return {};
  return {group->ranks().begin(), group->ranks().end()};
}

TEST(ExpertAndTensorParallel, LowersEachAxisOverItsGroups) {
  const ir::TaskGraph graph = composed_graph({kReplicate, kTensorParallel, kExperts});
  EXPECT_EQ(graph.num_ranks(), 4);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const int replica = rank / 2, member = rank % 2;  // dp and tp coordinates, tp fastest
    const std::vector<int> tensor_group = {2 * replica, 2 * replica + 1};
    const std::vector<int> replica_group = {member, member + 2};
    const plan::Plan plan = planner::lower(graph, rank, {});
    std::map<std::string, plan::ParameterBlock> blocks;
    for (const plan::ParameterLoad& load : plan.parameters())
      blocks[load.initializer()] = load.block();
    for (const char* expert : {"w1", "w2"}) {
      EXPECT_EQ(blocks.at(expert).dim(), 0) << expert;
      EXPECT_EQ(blocks.at(expert).start(), replica) << expert;
      EXPECT_EQ(group_ranks(plan, blocks.at(expert).group()), replica_group) << expert;
    }
    EXPECT_EQ(blocks.at("wa").start(), 3 * member);
    EXPECT_EQ(blocks.at("wb").start(), 3 * member);
    EXPECT_EQ(group_ranks(plan, blocks.at("wa").group()), tensor_group);
    int exchanges = 0, tensor_parallel = 0, data_parallel = 0;
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        if (!instruction.has_collective()) continue;
        const plan::Collective& collective = instruction.collective();
        const std::vector<int> ranks = group_ranks(plan, collective.group());
        if (collective.kind() == plan::Collective::ALL_TO_ALL) {
          ++exchanges;
          EXPECT_EQ(ranks, replica_group) << instruction.label();
        } else if (instruction.label().ends_with("tp_all_reduce")) {
          ++tensor_parallel;
          EXPECT_EQ(ranks, tensor_group) << instruction.label();
        } else {
          // The dense weights' gradients, averaged over the replicas (the experts' are their
          // own).
          ++data_parallel;
          EXPECT_EQ(ranks, replica_group) << instruction.label();
          for (int tensor : collective.inputs()) {
            const std::string& name = plan.tensors(tensor).name();
            EXPECT_EQ(name.find("grad/w1"), std::string::npos) << name;
            EXPECT_EQ(name.find("grad/w2"), std::string::npos) << name;
          }
        }
      }
    }
    EXPECT_EQ(exchanges, 3);
    EXPECT_EQ(tensor_parallel, 2);
    EXPECT_GE(data_parallel, 1);
  }
}

// DualPipe's overlapped pair written by hand: on each device the forward of microbatch 1 (on
// "compute") runs with the backward of microbatch 0 (on "compute2"). Cut around their
// exchanges, each task's parts follow its own exchanges only: no edge joins a part of one to a
// part of the other, so one waiting at an exchange never holds the other back (taking turns
// did, expert_exchanges.h).
TEST(ExpertParallel, TheComputePartsOfAnOverlappedPairRunFreeOfEachOther) {
  ir::TaskGraph graph = expert_task_graph(4);
  const std::string order =
      R"([[{"MB": 0, "PASS": "F"}], [{"MB": 1, "PASS": "F"}, {"MB": 0, "PASS": "B"}],
          [{"MB": 1, "PASS": "B"}]])";
  testing::apply_directives(graph, R"([
      {"op": "split", "dim_name": "MB", "filter": {}, "num_microbatches": 2},
      {"op": "place", "devices": [0], "filter": {"PASS": "B"}, "stream": "compute2"},
      {"op": "replicate", "devices": [0, 1]},
      {"op": "shard", "devices": [0, 1], "params": {"w*": 0}},
      {"op": "order", "device": 0, "filters": )" +
                                       order + R"(},
      {"op": "order", "device": 1, "filters": )" +
                                       order + "}]");
  ASSERT_EQ(planner::sim::overlapped_pairs(graph).size(), 1u);
  EXPECT_EQ(planner::separate_expert_exchanges(graph), 6);
  ir::verify_or_throw(graph, "after separating the expert exchanges");
  const auto member = [](const ir::Task& task) {
    if (task.kind != ir::TaskKind::kCompute) return -1;
    if (task.pass == ir::Pass::kForward && task.microbatch == 1) return 0;
    if (task.pass == ir::Pass::kBackward && task.microbatch == 0) return 1;
    return -1;
  };
  int forward_parts = 0, backward_parts = 0;
  for (const ir::Task& task : graph.tasks()) {
    if (task.stream == "compute" && member(task) == 0) ++forward_parts;
    if (task.stream == "compute2" && member(task) == 1) ++backward_parts;
  }
  EXPECT_EQ(forward_parts, 3);  // cut around two exchanges
  EXPECT_EQ(backward_parts, 2);
  const std::string text = ir::print(graph);
  for (const ir::Edge& edge : graph.edges()) {
    const int from = member(graph.task(edge.from));
    const int to = member(graph.task(edge.to));
    EXPECT_FALSE(from >= 0 && to >= 0 && from != to)
        << "edge " << edge.from << " -> " << edge.to << " in\n"
        << text;
  }
}

std::string planning_error(const std::vector<std::string>& list) {
  try {
    composed_graph(list);
  } catch (const Error& error) {
    return error.what();
  }
  return "planned";
}

TEST(ExpertAndTensorParallel, RefusesAParameterBothSplit) {
  const std::string message = planning_error(
      {kReplicate, R"({"op": "shard", "axis": "tp", "params": {"wa": 1, "wb": 0, "w2": 1}})",
       kExperts});
  EXPECT_NE(message.find("$.directives[1].params"), std::string::npos) << message;
  EXPECT_NE(message.find("$.directives[2].params"), std::string::npos) << message;
  EXPECT_NE(message.find("'w2'"), std::string::npos) << message;
}

TEST(ExpertAndTensorParallel, RefusesTwoShardsWithoutReplicas) {
  const std::string message = planning_error({kTensorParallel, kExperts});
  EXPECT_NE(message.find("$.directives[1]"), std::string::npos) << message;
  EXPECT_NE(message.find("second shard directive composes only"), std::string::npos) << message;
}

}  // namespace
}  // namespace piper
