#include "planner/directives/vocab_parallel.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace piper::planner {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorId;

// Emits the ops that replace `base`, named after it, in its pass and task.
class Emitter {
 public:
  Emitter(PlacingGraph& graph, const ir::Op& base) : graph_(graph), base_(base) {}

  // An op of `type` writing a new tensor of whole shape `shape` (or `into`), placed.
  TensorId op(const std::string& type, std::vector<TensorId> inputs, const Shape& shape,
              DType dtype, ir::Attributes attributes = {}, TensorId into = -1) {
    const std::string name = base_.name + "/vocab_parallel/" + type + std::to_string(++count_);
    if (into < 0) into = graph_.add_tensor(tensor(name, shape, dtype, ir::Role::kActivation));
    ir::Op op;
    op.type = type;
    op.name = name;
    op.inputs = std::move(inputs);
    op.outputs = {into};
    op.attributes = std::move(attributes);
    op.pass = base_.pass;
    op.tags = base_.tags;
    graph_.place_op(std::move(op));
    return into;
  }

  // Like `op`, of `like`'s dtype.
  TensorId same(const std::string& type, std::vector<TensorId> inputs, const Shape& shape,
                TensorId like, ir::Attributes attributes = {}, TensorId into = -1) {
    return op(type, std::move(inputs), shape, dtype(like), std::move(attributes), into);
  }

  TensorId ints(const Shape& shape, const std::vector<int64_t>& values) {
    return constant(shape, DType::kInt64, values.data(), values.size() * sizeof(int64_t));
  }
  TensorId int_scalar(int64_t value) { return ints({}, {value}); }
  TensorId float_scalar(float value) { return constant({}, DType::kFloat32, &value, sizeof value); }
  // A scalar 0 of `like`'s dtype (float32 or bfloat16: all bits zero).
  TensorId zero(TensorId like) {
    const std::vector<uint8_t> bits(ir::dtype_size(dtype(like)), 0);
    return constant({}, dtype(like), bits.data(), bits.size());
  }

  TensorId reshape(TensorId x, const Shape& shape, TensorId into = -1) {
    return same("Reshape", {x, ints({static_cast<int64_t>(shape.size())}, shape)}, shape, x, {},
                into);
  }

  // `x` with `dims` size-1 dimensions inserted at `axis`.
  TensorId insert_ones(TensorId x, int axis, int dims = 1) {
    Shape shape = whole(x);
    shape.insert(shape.begin() + axis, dims, 1);
    return reshape(x, shape);
  }

  // [0, block, 2·block, ...] over the members, each member's own entry (its first row) at
  // `axis` of a tensor of rank `rank`, size 1 elsewhere.
  TensorId member_offsets(int64_t block, int axis, int rank) {
    const int64_t parts = graph_.group_size();
    std::vector<int64_t> values(static_cast<size_t>(parts));
    for (int64_t g = 0; g < parts; ++g) values[g] = g * block;
    const TensorId cut = graph_.member_block(ints({parts}, values), base_);
    Shape shape(static_cast<size_t>(rank), 1);
    shape[axis] = parts;
    return reshape(cut, shape);
  }

  Shape whole(TensorId x) const { return graph_.whole_shape(x); }
  DType dtype(TensorId x) const { return graph_.placed().tensor(x).dtype; }
  int64_t parts() const { return graph_.group_size(); }

 private:
  TensorId constant(const Shape& shape, DType dtype, const void* data, size_t bytes) {
    ir::Tensor t = tensor(base_.name + "/vocab_parallel/constant" + std::to_string(++count_), shape,
                          dtype, ir::Role::kConstant);
    t.data.resize(bytes);
    std::memcpy(t.data.data(), data, bytes);
    return graph_.add_tensor(std::move(t));
  }

  static ir::Tensor tensor(std::string name, const Shape& shape, DType dtype, ir::Role role) {
    ir::Tensor t;
    t.name = std::move(name);
    t.shape = shape;
    t.dtype = dtype;
    t.role = role;
    return t;
  }

  PlacingGraph& graph_;
  const ir::Op& base_;
  int count_ = 0;
};

int normalize_axis(int64_t axis, size_t rank) {
  return static_cast<int>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis);
}

Shape with(Shape shape, int axis, int64_t size) {
  shape.insert(shape.begin() + axis, size);
  return shape;
}

// The ids' members: ids [...] against rows of `block` per member, the members at `axis`.
VocabParallel::MemberIds member_ids(Emitter& e, TensorId ids, int64_t block, int axis) {
  const Shape shape = with(e.whole(ids), axis, e.parts());
  const auto rank = static_cast<int>(shape.size());
  VocabParallel::MemberIds result;
  result.local =
      e.same("Sub", {e.insert_ones(ids, axis), e.member_offsets(block, axis, rank)}, shape, ids);
  const TensorId zero = e.int_scalar(0);
  const TensorId above = e.op("GreaterOrEqual", {result.local, zero}, shape, DType::kBool);
  const TensorId below = e.op("Less", {result.local, e.int_scalar(block)}, shape, DType::kBool);
  result.in_range = e.op("And", {above, below}, shape, DType::kBool);
  result.safe = e.same("Where", {result.in_range, result.local, zero}, shape, ids);
  return result;
}

bool is_vocab_split(const PlacingGraph& graph, TensorId tensor, int dim) {
  return graph.placed().tensor(tensor).placement == ir::Placement::sharded(dim);
}

bool has_input(const ir::Op& op, size_t i) { return i < op.inputs.size() && op.inputs[i] >= 0; }

// One output, or optional ones omitted.
bool single_output(const ir::Op& op) {
  return std::all_of(op.outputs.begin() + 1, op.outputs.end(), [](TensorId t) { return t < 0; });
}

}  // namespace

bool VocabParallel::rewrite(const ir::Op& op) {
  if (op.type == "Gather") return embedding(op);
  if (op.type == "piper.GatherGrad") return embedding_gradient(op);
  if (op.type == "SoftmaxCrossEntropyLoss") return cross_entropy(op);
  if (op.type == "piper.SoftmaxCrossEntropyLossGrad") return cross_entropy_gradient(op);
  return false;
}

// out = Σ_g Where(in_range[g], GatherND(table[g], safe[g]), 0) over the table viewed as
// [G, V/G, ...]: on each member, its own rows' lookups, a partial sum of the whole lookup.
bool VocabParallel::embedding(const ir::Op& op) {
  const TensorId table = op.inputs.at(0), ids = op.inputs.at(1);
  const Shape table_shape = graph_.whole_shape(table);
  if (normalize_axis(ir::attr_int(op.attributes, "axis", 0), table_shape.size()) != 0 ||
      !is_vocab_split(graph_, table, 0) || !graph_.placed().tensor(ids).placement.is_replicated() ||
      graph_.placed().tensor(ids).dtype != DType::kInt64) {
    return false;
  }
  Emitter e(graph_, op);
  const int64_t block = table_shape[0] / e.parts();
  Shape blocks = table_shape;
  blocks[0] = block;
  blocks.insert(blocks.begin(), e.parts());
  const TensorId table_blocks = e.reshape(table, blocks);
  const MemberIds members = member_ids(e, ids, block, 0);
  const TensorId tuples =
      e.insert_ones(members.safe, static_cast<int>(e.whole(members.safe).size()));
  Shape rows_shape = e.whole(members.safe);
  rows_shape.insert(rows_shape.end(), table_shape.begin() + 1, table_shape.end());
  const TensorId rows =
      e.same("GatherND", {table_blocks, tuples}, rows_shape, table, {{"batch_dims", int64_t{1}}});
  const auto row_rank = static_cast<int>(table_shape.size()) - 1;
  const TensorId mask =
      e.insert_ones(members.in_range, static_cast<int>(e.whole(members.in_range).size()), row_rank);
  const TensorId masked = e.same("Where", {mask, rows, e.zero(table)}, rows_shape, table);
  e.same("ReduceSum", {masked}, graph_.whole_shape(op.outputs.at(0)), table,
         {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{0}}}, op.outputs.at(0));
  lookups_[{ids, table_shape[0]}] = {tuples, mask};
  return true;
}

// dTable = GatherNDGrad(Where(in_range, dY, 0), safe) over [G, V/G, ...]: each member
// scatters the gradients of its own rows into its block of the table's gradient.
bool VocabParallel::embedding_gradient(const ir::Op& op) {
  const Shape table_shape = graph_.whole_shape(op.outputs.at(0));
  const auto found = lookups_.find({op.inputs.at(1), table_shape.at(0)});
  if (found == lookups_.end() || !single_output(op) ||
      normalize_axis(ir::attr_int(op.attributes, "axis", 0), table_shape.size()) != 0) {
    return false;
  }
  const Lookup& lookup = found->second;
  Emitter e(graph_, op);
  const TensorId dy = op.inputs.at(0);
  const Shape masked_shape = with(e.whole(dy), 0, e.parts());
  const TensorId masked =
      e.same("Where", {lookup.mask, e.insert_ones(dy, 0), e.zero(dy)}, masked_shape, dy);
  Shape blocks = table_shape;
  blocks[0] /= e.parts();
  blocks.insert(blocks.begin(), e.parts());
  const TensorId gradient = e.same("piper.GatherNDGrad", {masked, lookup.tuples}, blocks, dy,
                                   {{"batch_dims", int64_t{1}}});
  e.reshape(gradient, table_shape, op.outputs.at(0));
  return true;
}

// Megatron's vocab_parallel_cross_entropy over logits x [N, C] split along C.
bool VocabParallel::cross_entropy(const ir::Op& op) {
  const TensorId x = op.inputs.at(0), labels = op.inputs.at(1);
  const Shape shape = graph_.whole_shape(x);
  if (shape.size() != 2 || !is_vocab_split(graph_, x, 1) || has_input(op, 2) ||
      !single_output(op) || !graph_.placed().tensor(labels).placement.is_replicated()) {
    return false;
  }
  Emitter e(graph_, op);
  const int64_t n = shape[0], block = shape[1] / e.parts();
  const Shape blocks = {n, e.parts(), block};
  LossRows rows;
  rows.labels = labels;
  // The maximum of each member's maxima: an all-gather of [N, G] before the second ReduceMax.
  const TensorId each_max = e.same("ReduceMax", {e.reshape(x, blocks)}, {n, e.parts()}, x,
                                   {{"axes", std::vector<int64_t>{2}}, {"keepdims", int64_t{0}}});
  rows.max = e.same("ReduceMax", {each_max}, {n, 1}, x,
                    {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}});
  const TensorId shifted = e.same("Sub", {x, rows.max}, shape, x);
  const TensorId sum = e.same("ReduceSum", {e.same("Exp", {shifted}, shape, x)}, {n}, x,
                              {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}});
  rows.log_sum = e.same("Log", {sum}, {n}, x);
  // The target's shifted logit: picked by the member holding it, zero on the others.
  rows.ids = member_ids(e, labels, block, 1);
  const Shape picked_shape = {n, e.parts(), 1};
  const TensorId picked =
      e.same("GatherElements", {e.reshape(shifted, blocks), e.reshape(rows.ids.safe, picked_shape)},
             picked_shape, x, {{"axis", int64_t{2}}});
  const TensorId owned = e.same(
      "Where", {e.reshape(rows.ids.in_range, picked_shape), picked, e.zero(x)}, picked_shape, x);
  const TensorId target = e.same("ReduceSum", {owned}, {n}, x,
                                 {{"axes", std::vector<int64_t>{1, 2}}, {"keepdims", int64_t{0}}});
  TensorId loss = e.same("Sub", {rows.log_sum, target}, {n}, x);
  const std::string reduction = ir::attr_string(op.attributes, "reduction", "mean");
  const TensorId out = op.outputs.at(0);
  if (op.attributes.count("ignore_index")) {
    const TensorId ignored =
        e.op("Equal", {labels, e.int_scalar(ir::attr_int(op.attributes, "ignore_index", 0))}, {n},
             DType::kBool);
    const TensorId kept = e.op("Not", {ignored}, {n}, DType::kBool);
    loss = e.same("Where", {kept, loss, e.zero(x)}, {n}, x);
    rows.weight = e.same("Cast", {kept}, {n}, x, {{"to", ir::onnx_data_type(e.dtype(x))}});
    rows.count = e.same("ReduceSum", {rows.weight}, {}, x, {{"keepdims", int64_t{0}}});
  }
  const ir::Attributes all = {{"keepdims", int64_t{0}}};
  if (reduction == "none") {
    e.same("Identity", {loss}, {n}, x, {}, out);
  } else if (reduction == "sum") {
    e.same("ReduceSum", {loss}, {}, x, all, out);
  } else if (rows.count >= 0) {
    e.same("Div", {e.same("ReduceSum", {loss}, {}, x, all), rows.count}, {}, x, {}, out);
  } else {
    e.same("ReduceMean", {loss}, {}, x, all, out);
  }
  losses_[x] = rows;
  return true;
}

// dx = (softmax(x) - onehot(labels)) · dL(row), per member on its block of classes.
bool VocabParallel::cross_entropy_gradient(const ir::Op& op) {
  const TensorId dl = op.inputs.at(0), x = op.inputs.at(1), labels = op.inputs.at(2);
  const auto found = losses_.find(x);
  if (found == losses_.end() || found->second.labels != labels || has_input(op, 3) ||
      !single_output(op)) {
    return false;
  }
  const LossRows& rows = found->second;
  Emitter e(graph_, op);
  const Shape shape = e.whole(x);
  const int64_t n = shape[0], block = shape[1] / e.parts();
  const Shape blocks = {n, e.parts(), block};
  const TensorId log_total = e.same("Add", {rows.max, e.reshape(rows.log_sum, {n, 1})}, {n, 1}, x);
  const TensorId softmax = e.same("Exp", {e.same("Sub", {x, log_total}, shape, x)}, shape, x);
  std::vector<int64_t> classes(static_cast<size_t>(block));
  std::iota(classes.begin(), classes.end(), int64_t{0});
  const TensorId hit =
      e.op("Equal", {e.reshape(rows.ids.local, {n, e.parts(), 1}), e.ints({block}, classes)},
           blocks, DType::kBool);
  const TensorId onehot =
      e.same("Cast", {hit}, blocks, x, {{"to", ir::onnx_data_type(e.dtype(x))}});
  const TensorId difference = e.same("Sub", {e.reshape(softmax, blocks), onehot}, blocks, x);
  // dL per row: dL itself for "none", else the scalar, divided by the rows counted by "mean".
  const std::string reduction = ir::attr_string(op.attributes, "reduction", "mean");
  TensorId factor = dl;
  if (reduction == "mean") {
    const TensorId count = rows.count >= 0 ? rows.count : e.float_scalar(static_cast<float>(n));
    factor = e.same("Div", {dl, count}, {}, x);
  }
  Shape factor_shape = e.whole(factor);
  if (rows.weight >= 0) {
    factor = e.same("Mul", {factor, rows.weight}, {n}, x);
    factor_shape = {n};
  }
  const TensorId factor3 =
      e.reshape(factor, factor_shape.empty() ? Shape{1, 1, 1} : Shape{n, 1, 1});
  e.reshape(e.same("Mul", {difference, factor3}, blocks, x), shape, op.outputs.at(0));
  return true;
}

}  // namespace piper::planner
