#include "planner/lower/dropout_key.h"

#include "formats/checksum.h"
#include "formats/error.h"

namespace piper::planner {

plan::DropoutKey dropout_key(const ir::OpGraph& graph, const ir::Op& op,
                             const ir::ReplicaRows& rows, const InstancePlace& place) {
  plan::DropoutKey key;
  key.set_node(formats::fnv1a64(op.name));
  const ir::TensorId data = op.inputs.at(0);
  const ir::Shape& shape = graph.tensor(data).shape;
  std::vector<int64_t> whole(shape.begin(), shape.end());
  std::vector<int64_t> offset(shape.size(), 0);
  const auto refuse = [&](const std::string& why) {
    throw Error("Dropout \"" + op.name + "\": its data " + why +
                ", so its masks cannot be keyed by the element's place in the whole tensor; "
                "place it elsewhere (replicated over the tensor-parallel group, or after the "
                "reduction)");
  };
  const ir::Placement& block = ir::held_placement(graph, data);
  if (place.parts > 1 && block.is_partial()) refuse("is a partial sum over its group");
  const bool tensor_parallel = place.parts > 1 && block.is_sharded();
  if (tensor_parallel) {
    whole.at(block.dim) *= place.parts;
    offset.at(block.dim) = place.member * shape.at(block.dim);
  }
  const ir::Placement& held = rows.held.at(data);
  if (rows.data.at(data) && held.is_partial()) refuse("is a partial sum over the batch's rows");
  if (rows.data.at(data) && held.is_sharded() && place.instances > 1) {
    if (tensor_parallel && held.dim == block.dim) {
      refuse("is split along dimension " + std::to_string(held.dim) +
             " both into the batch's rows and into tensor-parallel blocks");
    }
    whole.at(held.dim) *= place.instances;
    offset.at(held.dim) = place.instance * shape.at(held.dim);
  }
  *key.mutable_whole_shape() = {whole.begin(), whole.end()};
  *key.mutable_offset() = {offset.begin(), offset.end()};
  return key;
}

}  // namespace piper::planner
