#include "planner/ir/replica_placements.h"

#include <algorithm>
#include <optional>

#include "planner/ir/placement.h"

namespace piper::ir {
namespace {

using Placements = std::vector<Placement>;

int normalize_axis(int64_t axis, size_t rank) {
  return static_cast<int>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis);
}

// What is known of one tensor beyond its placement.
struct Rows {
  // Held along a dimension: 0 for the replicas' rows in blocks (replica r's block is the whole
  // batch's r-th), else 1 + the op that put them in another order (a Concat, a NonZero whose
  // picks they are). Tensors of two orders pair other rows than one process pairs.
  int order = 0;
  bool picked = false;
  // Non-negative int64 indices (NonZero's coordinates, values made from them): where replica r
  // holds v, one process holds v + r * step, so with `step` the replica's rows' extent they
  // index its rows in one process's (a negative one would count from another end).
  bool index = false;
  int64_t step = 0;
  // NonZero's coordinates: the dimension of their components, and the component of the rows
  // (whose step is `step`); the others are coordinates every replica shares the meaning of.
  int components = -1;
  int row_component = -1;

  bool shifted() const { return index || components >= 0; }
};

class Follower {
 public:
  Follower(const OpGraph& graph, bool rows_in_any_order)
      : graph_(graph), any_order_(rows_in_any_order), rows_(graph.num_tensors()) {
    result_.held.assign(static_cast<size_t>(graph.num_tensors()), Placement{});
    result_.data.assign(static_cast<size_t>(graph.num_tensors()), false);
    result_.picked.assign(static_cast<size_t>(graph.num_tensors()), false);
    for (const Tensor& tensor : graph.tensors()) shapes_.push_back(tensor.shape);
    for (TensorId input : graph.inputs) {
      result_.data[input] = true;
      if (!graph.tensor(input).shape.empty()) result_.held[input] = Placement::sharded(0);
    }
  }

  ReplicaRows run() && {
    for (OpId id = 0; id < graph_.num_ops(); ++id) visit(id);
    for (TensorId id = 0; id < graph_.num_tensors(); ++id) result_.picked[id] = rows_[id].picked;
    return std::move(result_);
  }

 private:
  const Placement& held(TensorId id) const { return result_.held[id]; }
  const Shape& shape(TensorId id) const { return shapes_[id]; }
  bool is_data(TensorId id) const { return id >= 0 && result_.data[id]; }

  void visit(OpId id) {
    const Op& op = graph_.op(id);
    bool data = false;
    bool shifted = false;
    for (TensorId in : op.inputs) {
      data = data || is_data(in);
      shifted = shifted || (in >= 0 && rows_[in].shifted());
    }
    // A shape, or an average over every replica (planner/batch_means.h), is alike on all.
    const bool alike = op.type == "Shape" || attr_string(op.attributes, "group", "") == "replicas";
    for (TensorId out : op.outputs) {
      if (out >= 0) result_.data[out] = data && !alike;
    }
    if (alike) return;
    if (any_order_ && op.type == "NonZero") return non_zero(id, op);
    // Indices of rows read by anything but what keeps them indices or reads them as such give
    // another value on every replica than one process's: their readers are not followed.
    if (shifted) {
      if (any_order_) indexed(id, op);
      return;
    }
    place(id, op);
  }

  // The rules of ir/placement.h over a group of one, with the orders the inputs' rows are in.
  void place(OpId id, const Op& op) {
    Placements given;
    for (TensorId in : op.inputs) given.push_back(in >= 0 ? held(in) : Placement{});
    OpPlacement decision = place_op(graph_, op, given, shapes_, 1);
    const bool concatenates = any_order_ && concatenates_rows(op, given);
    if (concatenates) decision = {given, {given[0]}};
    // A tensor computed from no data (a mask expanded to the rows) is every row's alike: it
    // is read as the replica's rows where the op needs it so.
    std::optional<int> order;
    bool picked = false;
    for (size_t i = 0; i < given.size(); ++i) {
      const TensorId in = op.inputs[i];
      if (in < 0) continue;
      if (given[i] != decision.inputs[i] &&
          !(given[i].is_replicated() && decision.inputs[i].is_sharded() && !is_data(in))) {
        return;
      }
      if (!given[i].is_sharded() || !decision.inputs[i].is_sharded()) continue;
      if (order && *order != rows_[in].order && !concatenates) return;
      order = rows_[in].order;
      picked = picked || rows_[in].picked;
    }
    if (!keeps_order_in_reshape(op, given, decision, order.value_or(0))) return;
    for (size_t j = 0; j < op.outputs.size(); ++j) {
      const TensorId out = op.outputs[j];
      if (out < 0) continue;
      result_.held[out] = decision.outputs[j];
      rows_[out].order = concatenates ? id + 1 : order.value_or(0);
      rows_[out].picked = picked;
    }
  }

  bool concatenates_rows(const Op& op, const Placements& given) const {
    if (op.type != "Concat" || given.empty() || !given[0].is_sharded()) return false;
    const auto same = [&](const Placement& p) { return p == given[0]; };
    const int axis =
        normalize_axis(attr_int(op.attributes, "axis", 0), shape(op.outputs[0]).size());
    return std::all_of(given.begin(), given.end(), same) && given[0].dim == axis;
  }

  // Rows in another order than blocks may merge with the dimensions after them, not split: a
  // split's leading part would hold some of each replica's rows.
  bool keeps_order_in_reshape(const Op& op, const Placements& given, const OpPlacement& decision,
                              int order) const {
    if (order == 0 || op.outputs.empty() || !decision.outputs[0].is_sharded()) return true;
    if (op.type != "Reshape" && op.type != "Flatten" && op.type != "Squeeze" &&
        op.type != "Unsqueeze") {
      return true;
    }
    const int64_t before = shape(op.inputs[0])[given[0].dim];
    const int64_t after = shape(op.outputs[0])[decision.outputs[0].dim];
    return after % before == 0;
  }

  // NonZero (X) of X held in blocks along `dim`: coordinates [rank, n], those along `dim`
  // the replica's own rows, n picks in an order of their own.
  void non_zero(OpId id, const Op& op) {
    const TensorId x = op.inputs[0];
    if (!held(x).is_sharded() || rows_[x].order != 0 || rows_[x].picked) return;
    const TensorId out = op.outputs[0];
    result_.held[out] = Placement::sharded(1);
    rows_[out].order = id + 1;
    rows_[out].picked = true;
    rows_[out].step = shape(x)[held(x).dim];
    rows_[out].components = 0;
    rows_[out].row_component = held(x).dim;
  }

  // An op reading indices of rows (or NonZero's coordinates): what follows them.
  void indexed(OpId id, const Op& op) {
    if (op.type == "Gather") return gather(op);
    if (op.type == "ScatterElements") return scatter_elements(op);
    const TensorId x = op.inputs[0];
    const Rows& in = rows_[x];
    if (in.components >= 0) return coordinates(id, op, in);
    if (op.type == "Mul") return scaled(id, op);
    if (op.type == "Add") return offset(id, op);
    const bool keeps = op.type == "Squeeze" || op.type == "Unsqueeze" || op.type == "Reshape" ||
                       op.type == "Expand" || op.type == "Identity" ||
                       (op.type == "Cast" && is_index_type(op.outputs[0]));
    if (keeps && in.index && !reads_shifted(op, 1)) follow_index(id, op, in.step);
  }

  bool is_index_type(TensorId id) const { return graph_.tensor(id).dtype == DType::kInt64; }

  // Whether an input from `first` on holds shifted values.
  bool reads_shifted(const Op& op, size_t first) const {
    for (size_t i = first; i < op.inputs.size(); ++i) {
      if (op.inputs[i] >= 0 && rows_[op.inputs[i]].shifted()) return true;
    }
    return false;
  }

  // The op's first output holds indices of `step`, placed as the rules place it (the picks
  // along the same dimension, in their order).
  void follow_index(OpId id, const Op& op, int64_t step) {
    place(id, op);
    const TensorId out = op.outputs[0];
    if (!held(out).is_sharded()) return;
    rows_[out].index = true;
    rows_[out].step = step;
  }

  // Transpose and Split of NonZero's coordinates [rank, n] (torch.where's): a component alone
  // is indices of the rows (the row component) or a coordinate no replica shifts.
  void coordinates(OpId id, const Op& op, const Rows& in) {
    const TensorId x = op.inputs[0];
    if (op.type == "Transpose") {
      std::vector<int64_t> perm = attr_ints(op.attributes, "perm");
      if (perm.empty()) perm = {1, 0};
      place(id, op);
      const TensorId out = op.outputs[0];
      if (!held(out).is_sharded()) return;
      const auto j = std::find(perm.begin(), perm.end(), in.components) - perm.begin();
      rows_[out].step = in.step;
      rows_[out].components = static_cast<int>(j);
      rows_[out].row_component = in.row_component;
      return;
    }
    const int axis = normalize_axis(attr_int(op.attributes, "axis", 0), shape(x).size());
    if (op.type != "Split" || axis != in.components) return;
    const auto sizes = split_sizes(op, shape(x)[axis]);
    if (!sizes || sizes->size() != op.outputs.size()) return;
    place(id, op);
    int64_t start = 0;
    for (size_t j = 0; j < op.outputs.size(); ++j) {
      const TensorId out = op.outputs[j];
      const int64_t end = start + (*sizes)[j];
      const bool rows = start <= in.row_component && in.row_component < end;
      if (out >= 0 && held(out).is_sharded()) {
        const bool alone = !rows || end - start == 1;
        if (!alone) result_.held[out] = {};
        rows_[out].index = alone;
        rows_[out].step = rows && alone ? in.step : 0;
      }
      start = end;
    }
  }

  // Split's sizes: its second input, or equal parts.
  std::optional<std::vector<int64_t>> split_sizes(const Op& op, int64_t extent) const {
    if (op.inputs.size() > 1 && op.inputs[1] >= 0) return constant_ints(graph_, op.inputs[1]);
    const auto parts = static_cast<int64_t>(op.outputs.size());
    if (extent % parts != 0) return std::nullopt;
    return std::vector<int64_t>(op.outputs.size(), extent / parts);
  }

  // Indices times a positive constant scalar c: one process's are c * (v + r * step).
  void scaled(OpId id, const Op& op) {
    const size_t index = rows_[op.inputs[0]].index ? 0 : 1;
    const TensorId other = op.inputs[1 - index];
    const auto factor = constant_ints(graph_, other);
    if (!rows_[op.inputs[index]].index || rows_[other].shifted() || !factor ||
        factor->size() != 1 || factor->front() <= 0) {
      return;
    }
    follow_index(id, op, rows_[op.inputs[index]].step * factor->front());
  }

  // The sum of two indices (a row's start in a flat index and another coordinate of the same
  // picks): one process's shifts by both steps.
  void offset(OpId id, const Op& op) {
    const TensorId a = op.inputs[0], b = op.inputs[1];
    if (!rows_[a].index || !rows_[b].index) return;
    follow_index(id, op, rows_[a].step + rows_[b].step);
  }

  // Gather (data, indices) along data's rows, held in blocks of `step`: the rows it picks.
  void gather(const Op& op) {
    const TensorId data = op.inputs[0], indices = op.inputs[1];
    const int axis = normalize_axis(attr_int(op.attributes, "axis", 0), shape(data).size());
    if (rows_[data].shifted() || !indexes_rows(data, axis, indices)) return;
    const TensorId out = op.outputs[0];
    result_.held[out] = Placement::sharded(axis + held(indices).dim);
    rows_[out].order = rows_[indices].order;
    rows_[out].picked = true;
  }

  // ScatterElements (data, indices, updates) along data's rows in blocks of `step`, by
  // indices along the picks of the updates: each replica writes its own rows. Data computed
  // from no data (index_add_'s zeros) is every row's alike.
  void scatter_elements(const Op& op) {
    const TensorId data = op.inputs[0], indices = op.inputs[1], updates = op.inputs[2];
    const int axis = normalize_axis(attr_int(op.attributes, "axis", 0), shape(data).size());
    const bool blank = held(data).is_replicated() && !is_data(data);
    const bool rows = held(data) == Placement::sharded(axis) && rows_[data].order == 0;
    if (rows_[data].shifted() || rows_[updates].shifted() || !(blank || rows)) return;
    if (!rows_[indices].index || shape(data)[axis] != rows_[indices].step ||
        !aligned_picks(indices, updates) || held(indices).dim != axis) {
      return;
    }
    result_.held[op.outputs[0]] = Placement::sharded(axis);
  }

  // Whether `indices` index the rows of `data` along `axis`, held in blocks.
  bool indexes_rows(TensorId data, int axis, TensorId indices) const {
    const Rows& index = rows_[indices];
    return held(data) == Placement::sharded(axis) && rows_[data].order == 0 &&
           !rows_[data].picked && index.index && index.step == shape(data)[axis] &&
           held(indices).is_sharded();
  }

  bool aligned_picks(TensorId a, TensorId b) const {
    return held(a).is_sharded() && held(a) == held(b) && rows_[a].order == rows_[b].order &&
           shape(a) == shape(b);
  }

  const OpGraph& graph_;
  const bool any_order_;
  std::vector<Rows> rows_;
  std::vector<Shape> shapes_;
  ReplicaRows result_;
};

}  // namespace

ReplicaRows replica_placements(const OpGraph& graph, bool rows_in_any_order) {
  return Follower(graph, rows_in_any_order).run();
}

}  // namespace piper::ir
