// shard with "style": "expert" (directives/expert_modules.h): two experts, one module each, each
// reading the rows a dropless router picked for it (NonZero's count), spread over 2 replicas.
#include <gtest/gtest.h>

#include <algorithm>

#include "directive_fixture.h"
#include "formats/error.h"
#include "planner/ir/dynamic_dims.h"
#include "planner/ir/text.h"
#include "planner/lower/lower.h"

namespace piper {
namespace {

// Expert e (attribute expert=e, as plan_model marks the nodes the annotations tag) multiplies
// the rows routed to it by its weight; the rows go back to their tokens by a scatter-add
// (piper.GatherGrad), forward and backward written out as autodiff writes them.
std::string expert_layer(const std::string& expert_reads) {
  std::string text = R"(
tensor x f32[6,4] input
tensor axis i64[1] constant data=[1]
tensor out f32[6,3] activation
tensor loss f32[] loss
tensor dout f32[6,3] activation
)";
  std::string ops;
  int index = 0;
  for (const std::string e : {"0", "1"}) {
    text += "tensor mask" + e + " bool[2,6] input\n";
    text += "tensor xs" + e + " f32[12,4] input\n";
    text += "tensor w" + e + " f32[4,3] parameter init=w" + e + "\n";
    text += "tensor count" + e + " i64[] activation\n";
    for (const std::string name :
         {"picks i64[2,12]", "picks_t i64[12,2]", "choice i64[12,1]", "token i64[12,1]",
          "token_flat i64[12]", "rows f32[12,4]", "y f32[12,3]", "back f32[6,3]", "dy f32[12,3]",
          "drows f32[12,4]", "dx f32[6,4]"}) {
      const size_t space = name.find(' ');
      text +=
          "tensor " + name.substr(0, space) + e + " " + name.substr(space + 1) + " activation\n";
    }
    text += "tensor dw" + e + " f32[4,3] gradient\n";
    const auto op = [&](const std::string& line) {
      ops += "op " + std::to_string(index++) + " " + line + "\n";
    };
    op("NonZero \"/route/nz" + e + "\" (mask" + e + ") -> (picks" + e + ", count" + e + ")");
    op("Transpose \"/route/t" + e + "\" (picks" + e + ") -> (picks_t" + e + ") {perm=[1,0]}");
    op("Split \"/route/split" + e + "\" (picks_t" + e + ") -> (choice" + e + ", token" + e +
       ") {axis=1}");
    op("Squeeze \"/route/squeeze" + e + "\" (token" + e + ", axis) -> (token_flat" + e + ")");
    op("Gather \"/route/gather" + e + "\" (x, token_flat" + e + ") -> (rows" + e + ") {axis=0}");
    const std::string read = expert_reads + e;
    op("MatMul \"/experts." + e + "/fc\" (" + read + ", w" + e + ") -> (y" + e + ") {expert=" + e +
       "}");
    op("piper.GatherGrad \"/combine" + e + "\" (y" + e + ", token_flat" + e + ") -> (back" + e +
       ") {axis=0}");
  }
  ops += "op " + std::to_string(index++) + " Add \"/sum\" (back0, back1) -> (out)\n";
  ops += "op " + std::to_string(index++) +
         " ReduceSum \"/loss\" (out) -> (loss) {keepdims=0, noop_with_empty_axes=0}\n";
  ops += "op " + std::to_string(index++) + " Identity \"/dloss\" (out) -> (dout) pass=B\n";
  for (const std::string e : {"0", "1"}) {
    const auto op = [&](const std::string& line) {
      ops += "op " + std::to_string(index++) + " " + line + " pass=B\n";
    };
    op("Gather \"/combine" + e + "/grad\" (dout, token_flat" + e + ") -> (dy" + e + ") {axis=0}");
    op("piper.MatMul \"/experts." + e + "/fc/dw\" (rows" + e + ", dy" + e + ") -> (dw" + e +
       ") {expert=" + e + ", transA=1}");
    op("piper.MatMul \"/experts." + e + "/fc/dx\" (dy" + e + ", w" + e + ") -> (drows" + e +
       ") {expert=" + e + ", transB=1}");
    op("piper.GatherGrad \"/route/gather" + e + "/grad\" (drows" + e + ", token_flat" + e +
       ") -> (dx" + e + ") {axis=0}");
  }
  for (const std::string e : {"0", "1"}) {
    ops += "op " + std::to_string(index++) + " piper.SGD \"optim/w" + e + "\" (w" + e + ", dw" + e +
           ") -> () {expert=" + e + ", lr=0.1} pass=U\n";
  }
  return text + ops + "loss loss\ntrained w0 grad=dw0\ntrained w1 grad=dw1\n";
}

ir::TaskGraph expert_graph(const std::string& expert_reads = "rows") {
  // expert_reads: "rows" (the rows routed to the expert) or "xs" (a static [12, 4] of its own).
  ir::TaskGraph parsed = ir::parse(expert_layer(expert_reads));
  ir::infer_dynamic_dims(parsed.op_graph());
  return ir::build_task_graph(std::move(parsed.op_graph()));
}

const char* kSpread = R"([
    {"op": "replicate", "devices": [0, 1]},
    {"op": "shard", "devices": [0, 1], "style": "expert", "tag": "EXPERT"}])";

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(ExpertModules, EachMemberRunsItsExpertOnEveryMembersRows) {
  ir::TaskGraph graph = expert_graph();
  testing::apply_directives(graph, kSpread, 12);
  const std::string text = ir::print(graph);
  // One slot: expert 0's ops, bound on member g to expert g's weight, in no data-parallel
  // reduction; expert 1's ops are gone.
  EXPECT_TRUE(has_line(text,
                       "tensor w0 f32[4,3] parameter init=w0 over=replicas "
                       "replica_inits=[w0,w1]"))
      << text;
  EXPECT_EQ(ir::print(ir::parse(text)), text);  // the text form reads the binding back
  EXPECT_EQ(text.find("/experts.1/"), std::string::npos) << text;
  // Forward: every member's rows for the slot's expert, with the counts first, and back.
  EXPECT_NE(text.find(" piper.AllToAllV \"rows0/all_to_all_v\" (rows0, rows1, count0, count1) "
                      "-> (rows0/to_experts, rows0/rows_received, rows0/rows_from) "
                      "{over=\"replicas\"} pass=F tags={}\n"),
            std::string::npos)
      << text;
  EXPECT_TRUE(has_line(text,
                       "tensor rows0/to_experts f32[24,4] activation "
                       "dynamic=[(0, rows0/rows_received, 1)]"))
      << text;
  EXPECT_NE(text.find(" piper.AllToAllVReturn \"/experts.0/fc/all_to_all_v_return\" "
                      "(y0/from_members, rows0/rows_from, count0, count1) -> (y0, y1) "
                      "{over=\"replicas\"} pass=F tags={}\n"),
            std::string::npos)
      << text;
  // Backward: the output gradient's rows travel as the forward's did (aligned with its total),
  // the weight gradient sums them and is scaled to the replicas' mean, the input gradient
  // returns.
  EXPECT_NE(text.find("piper.AllToAllV \"dy0/all_to_all_v\" (dy0, dy1, count0, count1, "
                      "rows0/rows_received) -> (dy0/to_experts) {over=\"replicas\"} pass=B"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Mul \"/experts.0/fc/dw/replica_mean\" (dw0/members_sum, "
                      "expert_parallel/replica_mean) -> (dw0) pass=B"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(drows0/from_members, rows0/rows_from, count0, count1) -> (drows0, "
                      "drows1)"),
            std::string::npos)
      << text;
  const ir::OpGraph& ops = graph.op_graph();
  ASSERT_EQ(ops.trained.size(), 1u);
  for (const ir::Task& task : graph.tasks()) {
    if (task.kind == ir::TaskKind::kCompute) continue;
    EXPECT_EQ(std::count(task.tensors.begin(), task.tensors.end(), ops.trained[0].gradient), 0)
        << ir::to_string(task.kind);
  }
}

TEST(ExpertModules, EachRankLoadsItsExpertAndExchangesOverTheReplicas) {
  ir::TaskGraph graph = expert_graph();
  testing::apply_directives(graph, kSpread, 12);
  for (int rank = 0; rank < 2; ++rank) {
    const plan::Plan plan = planner::lower(graph, rank, {});
    ASSERT_EQ(plan.parameters_size(), 1);
    EXPECT_EQ(plan.parameters(0).initializer(), "w" + std::to_string(rank));
    EXPECT_TRUE(plan.collect_parameters());
    int exchanges = 0, returns = 0;
    for (const plan::Stream& stream : plan.streams()) {
      for (const plan::Instruction& instruction : stream.instructions()) {
        if (!instruction.has_collective()) continue;
        const plan::Collective& collective = instruction.collective();
        const bool exchange = collective.kind() == plan::Collective::ALL_TO_ALL_V;
        if (!exchange && collective.kind() != plan::Collective::ALL_TO_ALL_V_RETURN) continue;
        (exchange ? exchanges : returns) += 1;
        for (const plan::CommGroup& group : plan.groups()) {
          if (group.id() != collective.group()) continue;
          EXPECT_EQ(std::vector<int>(group.ranks().begin(), group.ranks().end()),
                    (std::vector<int>{0, 1}));
        }
      }
    }
    EXPECT_EQ(exchanges, 2);  // the rows forward, their gradient backward
    EXPECT_EQ(returns, 2);
  }
}

void expect_refused(ir::TaskGraph graph, const std::string& directives, const std::string& words) {
  try {
    testing::apply_directives(graph, directives, 12);
    FAIL() << "expected: " << words;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(ExpertModules, RefusesWhatCannotSpreadNamingTheNode) {
  // An expert reading a per-expert tensor whose rows are not a run-time count.
  expect_refused(expert_graph("xs"), kSpread,
                 "test.json: $.directives[1].tag (shard): the node '/experts.0/fc' (expert 0) "
                 "reads 'xs0' [12, 4], which is not row-dynamic");
  expect_refused(expert_graph(), R"([
    {"op": "replicate", "devices": [0, 1, 2]},
    {"op": "shard", "devices": [0, 1, 2], "style": "expert", "tag": "EXPERT"}])",
                 "the 2 experts tagged \"EXPERT\" do not spread evenly over groups of 3 devices");
  // A Dropout inside the experts: its mask is keyed by the rows' place, which the spread moves.
  ir::TaskGraph dropout = expert_graph();
  for (ir::OpId id = 0; id < dropout.op_graph().num_ops(); ++id) {
    ir::Op& op = dropout.op_graph().op(id);
    if (op.name == "/experts.0/fc" || op.name == "/experts.1/fc") op.type = "Dropout";
  }
  expect_refused(std::move(dropout), kSpread,
                 "the node '/experts.0/fc' is a Dropout inside an expert");
  // Experts spread over devices no replicate spans.
  expect_refused(expert_graph(), R"([
    {"op": "shard", "devices": [0, 1], "style": "expert", "tag": "EXPERT"}])",
                 "$.directives[0].devices (shard): style \"expert\" spreads experts over "
                 "data-parallel replicas");
}

}  // namespace
}  // namespace piper
