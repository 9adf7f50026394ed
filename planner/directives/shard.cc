// shard: tensor and expert parallelism. The parameters the directive names are split along a
// dimension over each group of devices, and placements (ir/placement.h) propagate from them
// through every op of the step, forward, backward and update, as GSPMD and DTensor propagate
// shardings. Where an op needs an input placed otherwise than it is, a reshard goes before
// it: piper.AllReduce (partial -> whole), piper.AllGather (block -> whole), piper.ReduceScatter
// (partial -> block), piper.AllToAll (blocks along one dimension -> along another) or a local
// piper.Shard (whole -> block), with Transposes around them for a dimension other than the
// first. The op graph then holds what one member runs, with every
// tensor's shape that member's block, and each device the other directives name stands for
// the group it leads (TaskGraph::shard_groups); lowering gives each member its blocks.
//
// Megatron's plan follows: q, k, v and the first MLP weight split along their output
// dimension, the attention output and second MLP weight along their input dimension, give
// one all-reduce after each in the forward (their products are partial sums) and one before
// each block's input LayerNormalization gradient in the backward.
//
// When the groups are data-parallel replica sets (expert parallelism), the op graph stays
// each replica's program on its own rows and only the ops that meet the split experts are
// placed (Partitioner::track_replica_placements): the tokens' dispatch buffer goes from rows
// to experts by an all-to-all and back by another, as GShard's. Experts written as one module
// each ("style": "expert") are spread by expert_modules.h instead.
//
// In bf16 a product whose result is a partial sum writes it in float32 (its kernel sums in
// float32 anyway), the reshard adds the members' sums in float32, and a Cast then rounds the
// whole sum to bfloat16 once, where one process rounds its whole product: rounding each
// member's sum first, as Megatron's bf16 all-reduce does, adds up to another value.
//
// Expert and tensor parallelism compose (a shard over the data-parallel axis and one over a
// tensor-parallel axis, in either order): the split over the replicas runs first, marking what
// it places (Tensor::placed_over_replicas) and its reshards (attribute "over"), and the
// tensor-parallel split then reads those tensors as whole over its group, so each tensor is
// split along one mesh axis and whole along the other, and each reshard's collective runs over
// its own axis' groups.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "formats/error.h"
#include "planner/directives/directive.h"
#include "planner/directives/expert_modules.h"
#include "planner/directives/vocab_parallel.h"
#include "planner/ir/placement.h"
#include "planner/ir/replica_placements.h"
#include "planner/ir/scalar_constant.h"
#include "planner/precision/precision.h"

namespace piper::planner {
namespace {

using ir::Placement;

class Partitioner final : public PlacingGraph {
 public:
  Partitioner(const ir::OpGraph& graph, const strategy::ShardDirective& shard, int64_t parts,
              const DirectiveContext& context)
      : in_(graph),
        shard_(shard),
        parts_(parts),
        over_replicas_(shard.over_replicas),
        context_(context) {
    for (const ir::Tensor& tensor : in_.tensors()) {
      const ir::TensorId id = add_tensor(tensor);
      // Split over the replicas already: whole over this group.
      if (tensor.placed_over_replicas) placement(id) = Placement{};
    }
    produced_.assign(static_cast<size_t>(in_.num_tensors()), false);
    for (const ir::Op& op : in_.ops()) {
      for (ir::TensorId out : op.outputs) {
        if (out >= 0) produced_[out] = true;
      }
    }
    for (const ir::TrainedParameter& trained : in_.trained) {
      parameter_of_[trained.gradient] = trained.parameter;
    }
  }

  ir::OpGraph run() {
    if (over_replicas_) track_replica_placements();
    place_parameters();
    for (ir::OpId id = 0; id < in_.num_ops(); ++id) place(in_.op(id));
    round_unread_sums();
    if (over_replicas_) keep_replica_placements();
    localize();
    keep_expert_placements();
    out_.keep_roles_of(in_);
    out_.replica_group = over_replicas_ ? parts_ : in_.replica_group;
    return std::move(out_);
  }

 private:
  // PlacingGraph, for the vocabulary-parallel rewrite.
  const ir::OpGraph& placed() const override { return out_; }
  ir::Shape whole_shape(ir::TensorId tensor) const override { return whole_.at(tensor); }
  int64_t group_size() const override { return parts_; }
  void place_op(ir::Op op) override { place_and_emit(std::move(op)); }
  ir::TensorId member_block(ir::TensorId tensor, const ir::Op& consumer) override {
    return slice(tensor, consumer);
  }

  ir::TensorId add_tensor(ir::Tensor tensor) override {
    whole_.push_back(tensor.shape);
    fixed_.push_back(false);
    return out_.add_tensor(std::move(tensor));
  }

  Placement& placement(ir::TensorId id) { return out_.tensor(id).placement; }

  std::string where(const std::string& field = "") const { return context_.where(field); }

  // Expert parallelism: the op graph is the program every data-parallel replica runs on its
  // own rows of the batch, so each tensor is, over the replicas, its rows along a dimension,
  // a partial sum over their rows, or replicated. Propagating the batch inputs' rows (placed
  // S(0)) through the whole-replica rules finds which, and every tensor's whole shape over the
  // group; ops placed no other way run as each replica's own (untouched), and only those that
  // meet the split parameters are placed, their reshards turning rows into expert blocks.
  void track_replica_placements() {
    ir::ReplicaRows rows = ir::replica_placements(in_);
    held_ = std::move(rows.held);
    data_ = std::move(rows.data);
    for (ir::TensorId id = 0; id < in_.num_tensors(); ++id) {
      if (held_[id].is_sharded()) whole_[id][held_[id].dim] *= parts_;
    }
  }

  // How the replicas hold `tensor`: its own placement once an op placed it, else the rows each
  // replica computes.
  Placement effective(ir::TensorId tensor) {
    if (!over_replicas_ || !placement(tensor).is_replicated()) return placement(tensor);
    return tensor < static_cast<ir::TensorId>(held_.size()) ? held_[tensor] : Placement{};
  }

  // An op that meets no placed tensor runs as every replica's own, as data parallelism runs it.
  bool runs_on_own_rows(const ir::Op& op) {
    for (ir::TensorId in : op.inputs) {
      if (in >= 0 && !placement(in).is_replicated()) return false;
    }
    for (ir::TensorId out : op.outputs) {
      if (out >= 0 && is_split_gradient(out)) return false;
    }
    return true;
  }

  bool is_split_gradient(ir::TensorId tensor) {
    const auto parameter = parameter_of_.find(tensor);
    return parameter != parameter_of_.end() && placement(parameter->second).is_sharded();
  }

  void emit_on_own_rows(ir::Op op) {
    for (ir::TensorId in : op.inputs) {
      if (in >= 0) fixed_[in] = true;
    }
    for (ir::TensorId out : op.outputs) {
      if (out >= 0) fixed_[out] = true;
    }
    out_.add_op(std::move(op));
  }

  // The placements an op is placed from: under expert parallelism a tensor of the replicas'
  // own is read as the rows it is, which must be known for data.
  std::vector<Placement> presented_placements(const ir::Op& op) {
    std::vector<Placement> given;
    for (ir::TensorId in : op.inputs) {
      if (in < 0) {
        given.emplace_back();
        continue;
      }
      given.push_back(effective(in));
      const bool own = in < static_cast<ir::TensorId>(data_.size()) && data_[in];
      if (over_replicas_ && own && given.back().is_replicated()) {
        throw Error(where("params") + ": the node '" + op.name + "' meets the split parameters " +
                    "and reads '" + out_.tensor(in).name +
                    "', which each replica computes from its own rows in a way Piper cannot "
                    "place over the group (an op without a placement rule computed it); split "
                    "fewer parameters or report the op");
      }
    }
    return given;
  }

  // What an op's outputs are best placed as: the rows each replica holds of them, or a split
  // gradient's parameter's blocks.
  std::vector<Placement> preferred_placements(const ir::Op& op) {
    std::vector<Placement> preferred;
    for (ir::TensorId out : op.outputs) {
      preferred.push_back(out < 0 ? Placement{} : written_placement(out, effective(out)));
    }
    return preferred;
  }

  // A placed output that is the rows its replica computes of it is that replica's own again.
  Placement stored_placement(ir::TensorId tensor, const Placement& placed) {
    const bool own = over_replicas_ && tensor < static_cast<ir::TensorId>(held_.size()) &&
                     placed == held_[tensor] && !is_split_gradient(tensor);
    return own ? Placement{} : placed;
  }

  // Tensors of the replicas' own keep their shapes and record how the replicas hold them;
  // the placed ones take their whole shape, which localize() cuts.
  void keep_replica_placements() {
    for (ir::TensorId id = 0; id < in_.num_tensors(); ++id) {
      ir::Tensor& tensor = out_.tensor(id);
      if (tensor.placement.is_replicated()) {
        tensor.replica_placement = held_[id];
      } else {
        tensor.shape = whole_[id];
      }
    }
    for (ir::TensorId id = 0; id < out_.num_tensors(); ++id) {
      ir::Tensor& tensor = out_.tensor(id);
      tensor.placed_over_replicas = !tensor.placement.is_replicated();
    }
  }

  // The tensors an expert-parallel split placed before this tensor-parallel one get their
  // placement over the replicas back; this split must have left them whole.
  void keep_expert_placements() {
    for (ir::TensorId id = 0; id < in_.num_tensors(); ++id) {
      const ir::Tensor& expert = in_.tensor(id);
      if (!expert.placed_over_replicas) continue;
      ir::Tensor& tensor = out_.tensor(id);
      if (!tensor.placement.is_replicated()) {
        throw Error(where("params") + ": '" + tensor.name + "' is split over the replicas by " +
                    shard_.after_expert_split + " and would be placed " +
                    ir::to_string(tensor.placement) +
                    " over this directive's groups; Piper splits a tensor along one mesh axis, "
                    "so leave the parameters it is computed from out of one of the two");
      }
      tensor.placement = expert.placement;
    }
  }

  // The parameters `params` names, split along their dimension.
  void place_parameters() {
    std::map<std::string, int> matches;
    std::map<ir::TensorId, std::string> matched_by;
    for (const ir::TrainedParameter& trained : in_.trained) {
      const ir::Tensor& parameter = in_.tensor(trained.parameter);
      const std::string& name =
          parameter.initializer.empty() ? parameter.name : parameter.initializer;
      for (const auto& [glob, dim] : shard_.params) {
        if (!strategy::glob_match(glob, name)) continue;
        ++matches[glob];
        const auto [previous, added] = matched_by.emplace(trained.parameter, glob);
        if (!added) {
          throw Error(where("params") + ": the parameter '" + name + "' matches both \"" +
                      previous->second + "\" and \"" + glob + "\"; make the globs disjoint");
        }
        if (parameter.placed_over_replicas) {
          throw Error(where("params") + ": \"" + glob + "\" names '" + name + "', which " +
                      shard_.after_expert_split + ".params splits over the replicas; a parameter " +
                      "is split along one mesh axis, so name it in one of the two directives");
        }
        check_split(name, glob, parameter.shape, dim);
        placement(trained.parameter) = Placement::sharded(static_cast<int>(dim));
        fixed_[trained.parameter] = true;
      }
    }
    for (const auto& [glob, dim] : shard_.params) {
      if (matches[glob] == 0) {
        throw Error(where("params") + ": \"" + glob +
                    "\" matches no trained parameter; piper-plan --list prints the model's "
                    "initializers");
      }
    }
  }

  void check_split(const std::string& name, const std::string& glob, const ir::Shape& shape,
                   int64_t dim) const {
    const std::string field = where("params") + ": \"" + glob + "\": the parameter '" + name +
                              "' of shape " + ir::to_string(shape);
    if (dim >= static_cast<int64_t>(shape.size())) {
      throw Error(field + " has no dimension " + std::to_string(dim));
    }
    if (shape[dim] % parts_ != 0) {
      throw Error(field + " does not split along dimension " + std::to_string(dim) + " (" +
                  std::to_string(shape[dim]) + ") over " + std::to_string(parts_) +
                  " devices; choose a group size that divides it");
    }
  }

  void place(const ir::Op& original) {
    if (vocab_.rewrite(original)) return;
    ir::Op op = original;
    if (op.type == "Sum") op = sum_partial_terms_first(std::move(op));
    if ((op.type == "piper.MatMul" || op.type == "Gemm") && op.inputs.size() > 2 &&
        op.inputs[2] >= 0 && product_is_partial(op)) {
      place_unfused_linear(op);
      return;
    }
    place_and_emit(std::move(op));
  }

  // A Sum of whole terms and several partial ones (gradient contributions) adds the partial
  // ones first, so that one all-reduce makes them whole rather than one each. A bf16 term
  // whose rounding waits for its sum is summed and rounded alone, as one process rounds it.
  ir::Op sum_partial_terms_first(ir::Op op) {
    std::vector<ir::TensorId> partial, whole;
    for (ir::TensorId in : op.inputs) {
      const bool partial_term = placement(in).is_partial() && !pending_sums_.count(in);
      (partial_term ? partial : whole).push_back(in);
    }
    if (partial.size() < 2 || whole.empty()) return op;
    ir::Op terms = op;
    terms.name = op.name + "/partial_terms";
    terms.inputs = partial;
    terms.outputs = {add_tensor(fresh(op.outputs[0], "/partial_terms"))};
    whole.push_back(terms.outputs[0]);
    op.inputs = whole;
    place_and_emit(std::move(terms));
    return op;
  }

  std::vector<Placement> given_placements(const ir::Op& op) {
    std::vector<Placement> given;
    for (ir::TensorId in : op.inputs) given.push_back(in >= 0 ? placement(in) : Placement{});
    return given;
  }

  bool product_is_partial(const ir::Op& op) {
    ir::Op product = op;
    product.inputs.resize(2);
    const ir::OpPlacement decision =
        ir::place_op(out_, product, given_placements(product), whole_, parts_);
    return decision.outputs[0].is_partial();
  }

  // A Linear whose product is a partial sum (its input dimension split) adds its bias once,
  // after the sum: the fused bias becomes an Add that the product's all-reduce precedes. In
  // bf16 the Add is float32 and a Cast rounds its result, so that the bias joins the float32
  // sum before the one rounding, as the fused kernel adds it.
  void place_unfused_linear(ir::Op op) {
    if (!ir::attr_string(op.attributes, "activation", "").empty() || op.outputs.size() > 1 ||
        ir::attr_float(op.attributes, "beta", 1.0) != 1.0) {
      throw Error(where("params") + ": the node '" + op.name +
                  "' splits its input dimension, so its product is a partial sum, but it fuses "
                  "an activation or scales its bias, which needs the whole sum; plan with "
                  "--no-fuse or split the layer along its output dimension");
    }
    const ir::TensorId y = op.outputs[0];
    ir::TensorId bias = op.inputs[2];
    const bool rounds = out_.tensor(y).dtype == ir::DType::kBFloat16;
    const auto float32 = [&](ir::TensorId like, const std::string& suffix) {
      ir::Tensor tensor = fresh(like, suffix);
      if (rounds) tensor.dtype = ir::DType::kFloat32;
      return add_tensor(std::move(tensor));
    };
    const ir::TensorId product = float32(y, "/product");
    const ir::TensorId sum = rounds ? float32(y, "/sum") : y;
    const ir::Op linear = op;
    op.inputs.resize(2);
    op.outputs = {product};
    place_and_emit(std::move(op));
    if (rounds) {
      const ir::TensorId widened = float32(bias, "/f32");
      place_and_emit(op_like(linear, "Cast", "/bias_f32", {bias}, {widened}, ir::DType::kFloat32));
      bias = widened;
    }
    place_and_emit(op_like(linear, "Add", "/bias", {product, bias}, {sum}));
    if (rounds) {
      place_and_emit(op_like(linear, "Cast", "/rounded", {sum}, {y}, ir::DType::kBFloat16));
    }
  }

  // An op of `like`'s pass and tags, named after it; a Cast to `cast_to`.
  static ir::Op op_like(const ir::Op& like, const std::string& type, const std::string& suffix,
                        std::vector<ir::TensorId> inputs, std::vector<ir::TensorId> outputs,
                        std::optional<ir::DType> cast_to = std::nullopt) {
    ir::Op op;
    op.type = type;
    op.name = like.name + suffix;
    op.inputs = std::move(inputs);
    op.outputs = std::move(outputs);
    if (cast_to) op.attributes["to"] = ir::onnx_data_type(*cast_to);
    op.pass = like.pass;
    op.tags = like.tags;
    return op;
  }

  void place_and_emit(ir::Op op) {
    if (over_replicas_ && runs_on_own_rows(op)) {
      emit_on_own_rows(std::move(op));
      return;
    }
    std::vector<Placement> given = presented_placements(op);
    const std::vector<Placement> preferred = preferred_placements(op);
    const auto decide = [&] {
      return meets_expert_split(op) ? whole(op)
                                    : ir::place_op(out_, op, sequence_split(op, given), whole_,
                                                   parts_, over_replicas_ ? &preferred : nullptr);
    };
    ir::OpPlacement decision = decide();
    if (round_pending_sums(op, given, decision)) decision = decide();
    std::vector<std::pair<ir::TensorId, ir::TensorId>> redirected;  // (written, gradient)
    for (size_t j = 0; j < op.outputs.size(); ++j) {
      const ir::TensorId out = op.outputs[j];
      if (out < 0) continue;
      const Placement wanted = written_placement(out, decision.outputs[j]);
      const bool averaged = over_replicas_ && is_split_gradient(out);
      if (wanted == decision.outputs[j] && !averaged) continue;
      if (op.type == "piper.Accumulate" || op.type == "Identity") {
        decision.inputs[0] = wanted;
        decision.outputs[j] = wanted;
      } else {
        ir::Tensor part = fresh(out, "/part");
        op.outputs[j] = add_tensor(std::move(part));
        redirected.emplace_back(op.outputs[j], out);
      }
    }
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const ir::TensorId in = op.inputs[i];
      if (in < 0 || given[i] == decision.inputs[i]) continue;
      if (assignable(in) && decision.inputs[i].is_sharded()) {
        check_split(in_.tensor(in).name, "(with '" + op.name + "')", whole_[in],
                    decision.inputs[i].dim);
        placement(in) = decision.inputs[i];
        fixed_[in] = true;
      } else {
        op.inputs[i] = reshard(in, given[i], decision.inputs[i], op);
      }
    }
    for (ir::TensorId in : op.inputs) {
      if (in >= 0) fixed_[in] = true;
    }
    for (size_t j = 0; j < op.outputs.size(); ++j) {
      if (op.outputs[j] < 0) continue;
      const Placement placed = stored_placement(op.outputs[j], decision.outputs[j]);
      const bool written_whole =
          std::any_of(redirected.begin(), redirected.end(),
                      [&](const auto& r) { return r.first == op.outputs[j]; });
      if (placed.is_partial() && !written_whole && sums_in_float32(op.type) &&
          out_.tensor(op.outputs[j]).dtype == ir::DType::kBFloat16) {
        op.outputs[j] = defer_rounding(op.outputs[j]);
      }
      placement(op.outputs[j]) = placed;
      fixed_[op.outputs[j]] = true;
    }
    const ir::Op emitted = op;
    out_.add_op(std::move(op));
    for (const auto& [written, gradient] : redirected) {
      reshard_into(written, effective(written), written_placement(gradient, {}), emitted, gradient);
    }
  }

  // A bf16 product's partial sum `tensor`, written instead as the float32 sum that its
  // rounding waits for (pending_sums_); returns that float32 tensor.
  ir::TensorId defer_rounding(ir::TensorId tensor) {
    ir::Tensor sum = fresh(tensor, "/sum");
    sum.dtype = ir::DType::kFloat32;
    const ir::TensorId id = add_tensor(std::move(sum));
    pending_sums_[tensor] = id;
    placement(tensor) = Placement::partial();
    fixed_[tensor] = true;
    return id;
  }

  // `reader`'s inputs whose rounding waits for their sum are summed and rounded: into the
  // placement `decision` reads them as, or, where it would take the partial sum on (a linear
  // op), into summed_placement. Updates `given`; returns whether any input was rounded.
  bool round_pending_sums(const ir::Op& reader, std::vector<Placement>& given,
                          const ir::OpPlacement& decision) {
    bool rounded = false;
    for (size_t i = 0; i < reader.inputs.size(); ++i) {
      const ir::TensorId in = reader.inputs[i];
      if (in < 0 || !pending_sums_.count(in)) continue;
      const Placement& needed = decision.inputs[i];
      round_sum(in, needed.is_partial() ? summed_placement(in) : needed, reader);
      rounded = true;
    }
    for (size_t i = 0; i < reader.inputs.size() && rounded; ++i) {
      if (reader.inputs[i] >= 0) given[i] = effective(reader.inputs[i]);
    }
    return rounded;
  }

  // Where a sum goes that its reader would take on partial: whole, or under sequence
  // parallelism an activation's (or its gradient's) block of the sequence, where Megatron
  // reduce-scatters a row-parallel output and a column-parallel input gradient.
  Placement summed_placement(ir::TensorId tensor) const {
    const ir::Shape& shape = whole_[tensor];
    const auto rank = static_cast<int>(shape.size());
    if (shard_.sequence_parallel && rank >= 2 && shape[rank - 2] % parts_ == 0) {
      return Placement::sharded(rank - 2);
    }
    return {};
  }

  // The bf16 `tensor` as its float32 sum over the group, placed `to`, rounded by a Cast.
  void round_sum(ir::TensorId tensor, const Placement& to, const ir::Op& reader) {
    const ir::TensorId sum = pending_sums_.at(tensor);
    pending_sums_.erase(tensor);
    const ir::TensorId whole = reshard(sum, Placement::partial(), to, reader);
    out_.add_op(op_like(reader, "Cast", "/rounded_sum", {whole}, {tensor}, ir::DType::kBFloat16));
    placement(tensor) = to;
  }

  // Sums nothing read: rounded whole after their product, so that every tensor has a writer.
  void round_unread_sums() {
    while (!pending_sums_.empty()) {
      const auto [tensor, sum] = *pending_sums_.begin();
      const ir::Op producer = out_.op(out_.producer(sum));
      round_sum(tensor, Placement{}, producer);
    }
  }

  // Under a tensor-parallel split after an expert-parallel one: whether `op` is one of the
  // experts' reshards or reads or writes a tensor split over the replicas, which are whole over
  // this group, so that it reads its inputs whole (a partial sum is all-reduced first).
  bool meets_expert_split(const ir::Op& op) const {
    if (over_replicas_) return false;
    const auto split = [&](ir::TensorId t) {
      return t >= 0 && t < in_.num_tensors() && in_.tensor(t).placed_over_replicas;
    };
    return ir::reshards_over_replicas(op) ||
           std::any_of(op.inputs.begin(), op.inputs.end(), split) ||
           std::any_of(op.outputs.begin(), op.outputs.end(), split);
  }

  static ir::OpPlacement whole(const ir::Op& op) {
    return {std::vector<Placement>(op.inputs.size()), std::vector<Placement>(op.outputs.size())};
  }

  // Sequence parallelism: a forward sum of whole or partial terms (the embeddings' sum, the
  // residual after a row-split layer) splits along the sequence instead, the next-to-last
  // dimension of [..., sequence, hidden] activations: a reduce-scatter replaces the all-reduce,
  // the norms and residuals that follow run on one block of the sequence, and the
  // column-split layers all-gather their input, as Megatron does.
  std::vector<Placement> sequence_split(const ir::Op& op, std::vector<Placement> given) {
    const bool sum = op.type == "Add" || op.type == "Sum";
    if (!shard_.sequence_parallel || op.pass != ir::Pass::kForward || !sum) return given;
    const ir::Shape& out = whole_[op.outputs[0]];
    const auto rank = static_cast<int>(out.size());
    const bool sharded =
        std::any_of(given.begin(), given.end(), [](const Placement& p) { return p.is_sharded(); });
    if (sharded || rank < 2 || out[rank - 2] % parts_ != 0) return given;
    for (size_t i = 0; i < given.size(); ++i) {
      const int dim = rank - 2 - (rank - static_cast<int>(whole_[op.inputs[i]].size()));
      if (dim >= 0 && whole_[op.inputs[i]][dim] != 1) given[i] = Placement::sharded(dim);
    }
    return given;
  }

  // The placement an op must give `tensor`: its parameter's for a trained gradient, the first
  // writer's for a tensor written several times (accumulated), else what the op gives.
  // Under expert parallelism a replicated parameter's gradient stays each replica's partial
  // sum over its rows: data parallelism reduces it.
  Placement written_placement(ir::TensorId tensor, const Placement& given) {
    const auto parameter = parameter_of_.find(tensor);
    if (parameter != parameter_of_.end()) {
      const Placement& split = placement(parameter->second);
      return over_replicas_ && split.is_replicated() ? held_[tensor] : split;
    }
    if (fixed_[tensor]) return effective(tensor);
    return given;
  }

  // Parameters, frozen initializers and optimizer state no op has read yet take the placement
  // their first reader needs (a bias follows its weight's split) instead of being resharded.
  bool assignable(ir::TensorId tensor) const {
    if (tensor >= in_.num_tensors() || produced_[tensor] || fixed_[tensor]) return false;
    const ir::Tensor& t = in_.tensor(tensor);
    return !t.initializer.empty() || t.role == ir::Role::kOptimizerState;
  }

  // A new activation like `like`, named after it.
  ir::Tensor fresh(ir::TensorId like, const std::string& suffix) {
    ir::Tensor tensor;
    tensor.name = out_.tensor(like).name + suffix;
    if (++names_[tensor.name] > 1) tensor.name += "." + std::to_string(names_[tensor.name] - 1);
    tensor.dtype = out_.tensor(like).dtype;
    tensor.shape = whole_[like];
    tensor.role = ir::Role::kActivation;
    // After an expert-parallel split, the rows the replicas hold of it: a reshard over this
    // group keeps them (Transpose and Reshape move them).
    if (!over_replicas_) tensor.replica_placement = out_.tensor(like).replica_placement;
    return tensor;
  }

  // `tensor` as `to`, through the collectives and slices that turn `from` into it: one copy
  // per tensor, placement and task, which the backward of the task's forward shares (it runs
  // after it, and a second collective would cost what keeping the copy saves).
  ir::TensorId reshard(ir::TensorId tensor, const Placement& from, const Placement& to,
                       const ir::Op& consumer) {
    const auto key = [&](ir::Pass pass) {
      return std::make_tuple(tensor, ir::to_string(to), consumer.tags, pass);
    };
    for (const ir::Pass pass : {consumer.pass, ir::Pass::kForward}) {
      const auto cached = cache_.find(key(pass));
      if (cached != cache_.end()) return cached->second;
    }
    const ir::TensorId result = convert(tensor, from, to, consumer);
    cache_.emplace(key(consumer.pass), result);
    return result;
  }

  // The reshard of a gradient written as `from` into the trained gradient tensor itself.
  void reshard_into(ir::TensorId written, const Placement& from, const Placement& to,
                    const ir::Op& producer, ir::TensorId gradient) {
    ir::TensorId result = convert(written, from, to, producer);
    if (over_replicas_ && is_split_gradient(gradient))
      result = mean_over_replicas(result, producer);
    ir::Op& last = out_.op(out_.num_ops() - 1);
    std::replace(last.outputs.begin(), last.outputs.end(), result, gradient);
    placement(gradient) = to;
    fixed_[gradient] = true;
  }

  ir::TensorId convert(ir::TensorId tensor, const Placement& from, const Placement& to,
                       const ir::Op& consumer) {
    if (from == to) return tensor;
    if (to.is_partial()) {
      throw std::logic_error("shard: no reshard makes a partial sum of '" +
                             out_.tensor(tensor).name + "'");
    }
    if (from.is_sharded() && to.is_sharded() && whole_[tensor][to.dim] % parts_ == 0) {
      return all_to_all(tensor, from.dim, to.dim, consumer);
    }
    if (from.is_sharded()) {
      const ir::TensorId moved = to_front(tensor, from.dim, from, consumer);
      const ir::TensorId whole = collective("piper.AllGather", moved, Placement{}, consumer);
      return convert(from_front(whole, from.dim, Placement{}, consumer), Placement{}, to, consumer);
    }
    if (from.is_partial() && to.is_replicated()) {
      return collective("piper.AllReduce", tensor, Placement{}, consumer);
    }
    const ir::TensorId moved = to_front(tensor, to.dim, from, consumer);
    const ir::TensorId block = from.is_partial() ? collective("piper.ReduceScatter", moved,
                                                              Placement::sharded(0), consumer)
                                                 : slice(moved, consumer);
    return from_front(block, to.dim, Placement::sharded(0), consumer);
  }

  // Blocks along `from` into blocks along `to` (DeepSpeed-Ulysses' and GShard's all-to-all):
  // with `to` moved to the front and split into [G, n / G], member g's block of row g goes to
  // member g, and the rows that come back, one per member's block of `from`, are put back
  // in front of the block they came from and merged with it.
  ir::TensorId all_to_all(ir::TensorId tensor, int from, int to, const ir::Op& consumer) {
    const ir::TensorId moved = to_front(tensor, to, Placement::sharded(from), consumer);
    const int block = from < to ? from + 1 : from;  // `from` in moved's numbering
    ir::Shape rows = whole_[moved];
    rows[0] /= parts_;
    rows.insert(rows.begin(), parts_);
    const ir::TensorId split =
        reshape(moved, rows, Placement::sharded(block + 1), "/ep_rows", consumer);
    ir::Tensor exchanged = fresh(split, "/exchanged");
    exchanged.shape[1] *= parts_;
    exchanged.shape[block + 1] /= parts_;
    const ir::TensorId received =
        emit("piper.AllToAll", "/all_to_all", {split}, std::move(exchanged), Placement::sharded(1),
             consumer, {{"dim", static_cast<int64_t>(block + 1)}});
    std::vector<int64_t> perm;
    for (int d = 1; d <= block; ++d) perm.push_back(d);
    perm.push_back(0);
    for (int d = block + 1; d < static_cast<int>(rows.size()); ++d) perm.push_back(d);
    const ir::TensorId sources = transpose(received, perm, Placement::sharded(1), consumer);
    const ir::TensorId merged =
        reshape(sources, whole_[moved], Placement::sharded(0), "/ep_merged", consumer);
    return from_front(merged, to, Placement::sharded(0), consumer);
  }

  // `tensor` (placed `placed`) reshaped to the whole shape `shape`, placed as `result`; its
  // shape constant names the whole shape until localize() names the block.
  ir::TensorId reshape(ir::TensorId tensor, const ir::Shape& shape, const Placement& result,
                       const std::string& suffix, const ir::Op& consumer) {
    ir::Tensor constant;
    constant.name = out_.tensor(tensor).name + suffix + "/shape";
    constant.dtype = ir::DType::kInt64;
    constant.shape = {static_cast<int64_t>(shape.size())};
    constant.role = ir::Role::kConstant;
    constant.data.resize(shape.size() * sizeof(int64_t));
    std::memcpy(constant.data.data(), shape.data(), constant.data.size());
    const ir::TensorId target = add_tensor(std::move(constant));
    ir::Tensor out = fresh(tensor, suffix);
    const Placement rows = out.replica_placement;
    if (rows.is_sharded() && (rows.dim != 0 || shape.at(0) != whole_[tensor].at(0))) {
      out.replica_placement = Placement{};  // the rows no longer lead: unknown
    }
    out.shape = shape;
    return emit("Reshape", suffix, {tensor, target}, std::move(out), result, consumer);
  }

  // A split parameter's gradient sums every replica's rows, where data parallelism averages
  // the replicated ones' over the replicas: it is scaled to their mean.
  ir::TensorId mean_over_replicas(ir::TensorId gradient, const ir::Op& producer) {
    if (replica_scale_ < 0) {
      replica_scale_ = add_tensor(
          ir::scalar_constant("expert_parallel/replica_mean", 1.0f / static_cast<float>(parts_)));
    }
    ir::Tensor out = fresh(gradient, "/replica_mean");
    return emit("Mul", "/replica_mean", {gradient, replica_scale_}, std::move(out),
                placement(gradient), producer);
  }

  ir::TensorId emit(const std::string& type, const std::string& suffix,
                    std::vector<ir::TensorId> inputs, ir::Tensor output, const Placement& placed,
                    const ir::Op& consumer, ir::Attributes attributes = {}) {
    output.placement = placed;
    const ir::TensorId out = add_tensor(std::move(output));
    fixed_[out] = true;
    ir::Op op;
    op.type = type;
    op.name = consumer.name + suffix;
    op.inputs = std::move(inputs);
    op.outputs = {out};
    op.attributes = std::move(attributes);
    if (over_replicas_ &&
        (type == "piper.Shard" || type.starts_with("piper.All") || type == "piper.ReduceScatter")) {
      op.attributes["over"] = std::string("replicas");
    }
    op.pass = consumer.pass;
    op.tags = consumer.tags;
    out_.add_op(std::move(op));
    return out;
  }

  ir::TensorId collective(const std::string& type, ir::TensorId tensor, const Placement& to,
                          const ir::Op& consumer) {
    ir::Tensor out = fresh(tensor, type == "piper.AllReduce" ? "/all_reduced" : "/resharded");
    const std::string suffix = type == "piper.AllReduce"   ? "/tp_all_reduce"
                               : type == "piper.AllGather" ? "/tp_all_gather"
                                                           : "/tp_reduce_scatter";
    return emit(type, suffix, {tensor}, std::move(out), to, consumer);
  }

  // A whole tensor cut into this member's block along its first dimension.
  ir::TensorId slice(ir::TensorId tensor, const ir::Op& consumer) {
    ir::Tensor out = fresh(tensor, "/block");
    return emit("piper.Shard", "/tp_slice", {tensor}, std::move(out), Placement::sharded(0),
                consumer, {{"group", std::string("tensor")}, {"num_shards", parts_}});
  }

  // `tensor`, placed `placed`, with dimension `dim` moved to the front (a Transpose; none for
  // dimension 0).
  ir::TensorId to_front(ir::TensorId tensor, int dim, const Placement& placed,
                        const ir::Op& consumer) {
    if (dim == 0) return tensor;
    std::vector<int64_t> perm = {dim};
    for (int d = 0; d < static_cast<int>(whole_[tensor].size()); ++d) {
      if (d != dim) perm.push_back(d);
    }
    return transpose(tensor, perm, placed, consumer);
  }

  // The inverse of to_front.
  ir::TensorId from_front(ir::TensorId tensor, int dim, const Placement& placed,
                          const ir::Op& consumer) {
    if (dim == 0) return tensor;
    std::vector<int64_t> perm;
    for (int d = 1; d <= dim; ++d) perm.push_back(d);
    perm.push_back(0);
    for (int d = dim + 1; d < static_cast<int>(whole_[tensor].size()); ++d) perm.push_back(d);
    return transpose(tensor, perm, placed, consumer);
  }

  ir::TensorId transpose(ir::TensorId tensor, const std::vector<int64_t>& perm, Placement placed,
                         const ir::Op& consumer) {
    ir::Tensor out = fresh(tensor, "/moved");
    for (size_t j = 0; j < perm.size(); ++j) out.shape[j] = whole_[tensor][perm[j]];
    const auto moved = [&](Placement& p) {
      if (p.is_sharded()) {
        p.dim = static_cast<int>(std::find(perm.begin(), perm.end(), p.dim) - perm.begin());
      }
    };
    moved(placed);
    moved(out.replica_placement);
    return emit("Transpose", "/tp_transpose", {tensor}, std::move(out), placed, consumer,
                {{"perm", perm}});
  }

  // Every tensor's shape becomes one member's block, and the shape constants of Reshape and
  // Expand ops with a split output name the block.
  void localize() {
    for (ir::TensorId id = 0; id < out_.num_tensors(); ++id) {
      ir::Tensor& tensor = out_.tensor(id);
      if (!tensor.placement.is_sharded()) continue;
      const int dim = tensor.placement.dim;
      if (tensor.shape.at(dim) % parts_ != 0) {
        throw Error(where() + ": the tensor '" + tensor.name + "' of shape " +
                    ir::to_string(tensor.shape) + " is split along dimension " +
                    std::to_string(dim) + ", which does not divide over " + std::to_string(parts_) +
                    " devices; choose a group size that divides it");
      }
      for (const ir::DynamicDim& dynamic : tensor.dynamic) {
        if (dynamic.dim == dim) {
          throw Error(where() + ": the tensor '" + tensor.name + "' would be split along " +
                      "dimension " + std::to_string(dim) +
                      ", whose extent is known only at run time; Piper cannot split it");
        }
      }
      tensor.shape[dim] /= parts_;
    }
    for (ir::OpId id = 0; id < out_.num_ops(); ++id) {
      ir::Op& op = out_.op(id);
      if ((op.type != "Reshape" && op.type != "Expand") || op.inputs.size() < 2) continue;
      if (!out_.tensor(op.outputs[0]).placement.is_sharded()) continue;
      op.inputs[1] = shape_constant(op.inputs[1], out_.tensor(op.outputs[0]).shape, op);
    }
  }

  ir::TensorId shape_constant(ir::TensorId original, const ir::Shape& shape, const ir::Op& op) {
    const ir::Tensor& constant = out_.tensor(original);
    if (constant.data.empty() || constant.dtype != ir::DType::kInt64) {
      throw Error(where() + ": the node '" + op.name +
                  "' reshapes a split tensor to a shape computed at run time; Piper needs it "
                  "constant to give each device its block");
    }
    ir::Tensor local = constant;
    local.name = constant.name + "/block";
    local.shape = {static_cast<int64_t>(shape.size())};
    local.data.resize(shape.size() * sizeof(int64_t));
    std::memcpy(local.data.data(), shape.data(), local.data.size());
    return add_tensor(std::move(local));
  }

  const ir::OpGraph& in_;
  const strategy::ShardDirective& shard_;
  const int64_t parts_;
  const bool over_replicas_;  // expert parallelism: the groups are data-parallel replicas
  const DirectiveContext& context_;
  ir::OpGraph out_;
  std::vector<ir::Shape> whole_;                       // per tensor of out_, until localize()
  std::vector<bool> fixed_;                            // placement decided: named, written or read
  std::vector<bool> produced_;                         // per tensor of in_: some op writes it
  std::map<ir::TensorId, ir::TensorId> parameter_of_;  // trained gradient -> parameter
  std::map<std::tuple<ir::TensorId, std::string, ir::Tags, ir::Pass>, ir::TensorId> cache_;
  std::map<std::string, int> names_;
  std::vector<Placement> held_;  // per tensor of in_: how the replicas hold it (expert parallelism)
  std::vector<bool> data_;       // per tensor of in_: computed from the batch
  ir::TensorId replica_scale_ = -1;
  std::map<ir::TensorId, ir::TensorId> pending_sums_;  // bf16 tensor -> its float32 partial sum
  VocabParallel vocab_{*this};
};

}  // namespace

void apply_shard(ir::TaskGraph& graph, const DirectiveContext& context) {
  const auto& shard = std::get<strategy::ShardDirective>(context.directive.spec);
  if (shard.style == "expert" && !shard.over_replicas) {
    throw Error(context.where("devices") +
                ": style \"expert\" spreads experts over data-parallel replicas, but no "
                "replicate (or zero) directive replicates over these devices; replicate over the "
                "same devices or mesh axis");
  }
  if (shard.style == "expert" && (!shard.filter.tags.empty() || shard.filter.pass)) {
    throw Error(context.where("filter") +
                ": the tag numbers the experts' nodes, which decides what is spread; drop the "
                "filter");
  }
  if (!shard.filter.tags.empty() || shard.filter.pass) {
    throw Error(context.where("filter") +
                ": tensor parallelism splits the whole model (its parameters decide what is "
                "split); drop the filter");
  }
  if (shard.stream != "compute") {
    throw Error(context.where("stream") +
                ": the tensor-parallel collectives run in order on the stream of the task that "
                "needs them; drop \"stream\"");
  }
  for (const ir::Task& task : graph.tasks()) {
    if (task.kind != ir::TaskKind::kCompute || task.devices != std::vector<int>{0} ||
        task.microbatch != 0) {
      throw std::logic_error(context.where() + ": shard runs on the DAG as built");
    }
  }
  const int64_t parts = static_cast<int64_t>(shard.groups.front().size());
  if (shard.style == "expert") {
    graph = ir::build_task_graph(spread_expert_modules(graph.op_graph(), parts, context));
    return;
  }
  ir::OpGraph partitioned = Partitioner(graph.op_graph(), shard, parts, context).run();
  graph = ir::build_task_graph(std::move(partitioned));
  if (shard.over_replicas) return;
  for (const auto& group : shard.groups) {
    graph.shard_groups.emplace_back(group.begin(), group.end());
  }
}

}  // namespace piper::planner
