// ir::replica_placements with rows in any order: the batch's rows followed through a dropless
// expert dispatch (HF Mixtral's torch.where, gathers by the picked rows and by a flat index,
// index_add_ back) and a Concat of row blocks, and what it does not follow; exact batch means
// (planner/batch_means.h) over what it follows, refused naming the node over what it does not.
#include "planner/ir/replica_placements.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "formats/error.h"
#include "planner/batch_means.h"
#include "planner/ir/text.h"

namespace piper::ir {
namespace {

using ::testing::HasSubstr;

// x[4,3]: the batch's rows. Each row picks some of 2 experts (logits > 0); the picked rows and
// their logits (through the flat index token * 2 + choice, as HF indexes routing weights) are
// gathered, and scattered back into zeros; both x and the result are then concatenated along
// the rows, as HF concatenates every layer's router logits.
const std::string kDispatch = R"(
tensor x f32[4,3] input
tensor w f32[3,2] parameter
tensor zero f32[] constant data=[0.0]
tensor axis i64[1] constant data=[1]
tensor two i64[] constant data=[2]
tensor flat_shape i64[2] constant data=[8,1]
tensor index_shape i64[2] constant data=[8,3]
tensor zeros f32[4,3] constant data=[0,0,0,0,0,0,0,0,0,0,0,0]
tensor logits f32[4,2] activation
tensor mask bool[4,2] activation
tensor picks i64[2,8] activation
tensor count i64[] activation
tensor picks_t i64[8,2] activation
tensor token i64[8,1] activation
tensor choice i64[8,1] activation
tensor token_flat i64[8] activation
tensor choice_flat i64[8] activation
tensor rows f32[8,3] activation
tensor flat_logits f32[8,1] activation
tensor scaled i64[8] activation
tensor flat_index i64[8] activation
tensor weights f32[8,1] activation
tensor y f32[8,3] activation
tensor token_2d i64[8,1] activation
tensor index i64[8,3] activation
tensor back f32[4,3] activation
tensor both f32[8,3] activation
tensor expert i64[4] activation
tensor by_expert f32[4,3] activation
op 0 MatMul "/router" (x, w) -> (logits)
op 1 Greater "/picked" (logits, zero) -> (mask)
op 2 NonZero "/where" (mask) -> (picks, count)
op 3 Transpose "/where_t" (picks) -> (picks_t) {perm=[1,0]}
op 4 Split "/split" (picks_t) -> (token, choice) {axis=1}
op 5 Squeeze "/token" (token, axis) -> (token_flat)
op 6 Squeeze "/choice" (choice, axis) -> (choice_flat)
op 7 Gather "/dispatch" (x, token_flat) -> (rows) {axis=0}
op 8 Reshape "/flat_logits" (logits, flat_shape) -> (flat_logits)
op 9 Mul "/row_start" (token_flat, two) -> (scaled)
op 10 Add "/flat_index" (scaled, choice_flat) -> (flat_index)
op 11 Gather "/routing" (flat_logits, flat_index) -> (weights) {axis=0}
op 12 Mul "/weigh" (rows, weights) -> (y)
op 13 Unsqueeze "/index_2d" (token_flat, axis) -> (token_2d)
op 14 Expand "/index" (token_2d, index_shape) -> (index)
op 15 ScatterElements "/combine" (zeros, index, y) -> (back) {axis=0}
op 16 Concat "/layers" (x, back) -> (both) {axis=0}
op 17 ArgMax "/expert" (x) -> (expert) {axis=1, keepdims=0}
op 18 Gather "/by_expert" (x, expert) -> (by_expert) {axis=0}
inputs x
)";

struct Follows {
  explicit Follows(const std::string& text, bool any_order = true)
      : graph(parse(text)), rows(replica_placements(graph.op_graph(), any_order)) {}
  std::string held(const char* name) const {
    return to_string(rows.held.at(*graph.op_graph().find_tensor(name)));
  }
  bool picked(const char* name) const {
    return rows.picked.at(*graph.op_graph().find_tensor(name));
  }
  TaskGraph graph;
  ReplicaRows rows;
};

TEST(ReplicaPlacements, FollowsRowsThroughADroplessDispatch) {
  const Follows follows(kDispatch);
  // NonZero's coordinates and what is gathered by them: the replica's picks.
  for (const char* name : {"picks_t", "token_flat", "rows", "weights", "y", "index"}) {
    EXPECT_EQ(follows.held(name), "S(0)") << name;
    EXPECT_TRUE(follows.picked(name)) << name;
  }
  // Scattered back by the rows' own indices, every row again, and concatenated with x.
  for (const char* name : {"back", "both"}) {
    EXPECT_EQ(follows.held(name), "S(0)") << name;
    EXPECT_FALSE(follows.picked(name)) << name;
  }
}

TEST(ReplicaPlacements, FollowsNoIndexItCannotTellIsARow) {
  // ArgMax's values are experts, not rows: a Gather of rows by them mixes replicas' rows.
  EXPECT_EQ(Follows(kDispatch).held("by_expert"), "R");
  // Without rows in any order (expert parallelism's all-to-all needs blocks), no picks.
  const Follows blocks(kDispatch, false);
  for (const char* name : {"rows", "back", "both"}) EXPECT_EQ(blocks.held(name), "R") << name;
  // A flat index into another tensor than the one whose rows it counts in twos.
  std::string other = kDispatch;
  other.replace(other.find("(flat_logits, flat_index)"), 25, "(rows, flat_index)");
  other.replace(other.find("tensor weights f32[8,1]"), 23, "tensor weights f32[8,3]");
  EXPECT_EQ(Follows(other).held("weights"), "R");
  // A negative index counts from the end of the replica's rows, not of one process's.
  std::string negative = kDispatch;
  negative.replace(negative.find("two i64[] constant data=[2]"), 27,
                   "two i64[] constant data=[-2]");
  EXPECT_EQ(Follows(negative).held("weights"), "R");
  EXPECT_EQ(Follows(kDispatch).held("weights"), "S(0)");
}

std::string with_mean(const std::string& of) {
  return kDispatch + "tensor mean f32[3] activation\ntensor loss f32[] loss\n" +
         "op 19 ReduceMean \"/balance\" (" + of +
         ") -> (mean) {axes=[0], keepdims=0}\n"
         "op 20 ReduceSum \"/loss\" (mean) -> (loss) {keepdims=0}\nloss loss\n";
}

std::string batch_means_refusal(const std::string& text, int64_t microbatches) {
  TaskGraph graph = parse(text);
  try {
    planner::make_batch_means_global(graph.op_graph(), 2, microbatches, "m.onnx", "s.json");
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "no error for\n" << text;
  return "";
}

TEST(ReplicaPlacements, MeansOverFollowedRowsAverageOverReplicas) {
  TaskGraph graph = parse(with_mean("both"));
  planner::make_batch_means_global(graph.op_graph(), 2, 1, "m.onnx", "s.json");
  const std::string text = print(graph);
  EXPECT_THAT(text, HasSubstr(R"(piper.AllReduce "/balance/replica_average" (mean) -> )"
                              R"((mean/replica_average) {average=1, group="replicas"})"));
  EXPECT_THAT(text, HasSubstr(R"(ReduceSum "/loss" (mean/replica_average) -> (loss))"));
  // With microbatches the step's mean cannot be taken ahead of them.
  EXPECT_THAT(batch_means_refusal(with_mean("both"), 2),
              HasSubstr("the node '/balance' takes a mean over the batch's rows"));
}

TEST(ReplicaPlacements, MeansOverPicksOrUnfollowedRowsAreRefusedNamingTheNode) {
  EXPECT_THAT(batch_means_refusal(with_mean("rows"), 1),
              HasSubstr("the node '/balance' takes a mean over the rows of 'rows' that each "
                        "replica picks"));
  EXPECT_THAT(batch_means_refusal(with_mean("by_expert"), 1),
              HasSubstr("the node '/balance' takes a mean over the first dimension of "
                        "'by_expert', computed from the batch by ops Piper cannot follow"));
}

}  // namespace
}  // namespace piper::ir
