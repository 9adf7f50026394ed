// The planner's Dropout keys (planner/lower/dropout_key.h): where an instance lies in the whole
// tensor, from its rows of the batch and its tensor-parallel block, and the layouts refused.
#include "planner/lower/dropout_key.h"

#include <gmock/gmock.h>

#include "formats/checksum.h"
#include "formats/error.h"

namespace piper::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

InstancePlace Place(int member, int parts, int instance, int instances) {
  InstancePlace place;
  place.member = member;
  place.parts = parts;
  place.instance = instance;
  place.instances = instances;
  return place;
}

// x [2, 8, 6] (a replica's microbatch of rows) -> Dropout "drop" -> y, with x's block over the
// tensor-parallel group placed as `block`.
struct DropoutGraph {
  ir::OpGraph graph;
  ir::Op op;
  explicit DropoutGraph(ir::Placement block) {
    ir::Tensor x;
    x.name = "x";
    x.shape = {2, 8, 6};
    x.role = ir::Role::kInput;
    x.placement = block;
    ir::Tensor y;
    y.name = "y";
    y.shape = x.shape;
    y.placement = block;
    graph.inputs.push_back(graph.add_tensor(x));
    op.type = "Dropout";
    op.name = "drop";
    op.inputs = {graph.inputs[0]};
    op.outputs = {graph.add_tensor(y)};
    graph.add_op(op);
  }
  plan::DropoutKey key(InstancePlace place) const {
    return dropout_key(graph, op, ir::replica_placements(graph), place);
  }
};

TEST(DropoutKey, RowsOfTheBatchAndTensorParallelBlocks) {
  const DropoutGraph dropout(ir::Placement::sharded(2));
  // Replica 1 of 2, microbatch 1 of 2: instance 3 of 4; member 1 of a group of 2.
  const plan::DropoutKey key = dropout.key(Place(1, 2, 3, 4));
  EXPECT_EQ(key.node(), formats::fnv1a64("drop"));
  EXPECT_THAT(key.whole_shape(), ElementsAre(8, 8, 12));
  EXPECT_THAT(key.offset(), ElementsAre(6, 0, 6));
  // One process: the tensor is its whole.
  const plan::DropoutKey whole = dropout.key({});
  EXPECT_THAT(whole.whole_shape(), ElementsAre(2, 8, 6));
  EXPECT_THAT(whole.offset(), ElementsAre(0, 0, 0));
}

TEST(DropoutKey, RefusesNamingTheNode) {
  for (const auto& [block, why] :
       {std::pair{ir::Placement::partial(), "is a partial sum over its group"},
        std::pair{ir::Placement::sharded(0), "split along dimension 0 both"}}) {
    const DropoutGraph dropout(block);
    try {
      dropout.key(Place(0, 2, 0, 2));
      FAIL() << "expected an error";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr("Dropout \"drop\": its data"));
      EXPECT_THAT(error.what(), HasSubstr(why));
    }
  }
}

}  // namespace
}  // namespace piper::planner
