// shard: tensor parallelism. The parameters the directive names are split along a dimension
// over each group of devices, and placements (ir/placement.h) propagate from them through
// every op of the step, forward, backward and update, as GSPMD and DTensor propagate
// shardings. Where an op needs an input placed otherwise than it is, a reshard goes before
// it: piper.AllReduce (partial -> whole), piper.AllGather (block -> whole), piper.ReduceScatter
// (partial -> block) or a local piper.Shard (whole -> block), with Transposes around them for
// a dimension other than the first. The op graph then holds what one member runs, with every
// tensor's shape that member's block, and each device the other directives name stands for
// the group it leads (TaskGraph::shard_groups); lowering gives each member its blocks.
//
// Megatron's plan follows: q, k, v and the first MLP weight split along their output
// dimension, the attention output and second MLP weight along their input dimension, give
// one all-reduce after each in the forward (their products are partial sums) and one before
// each block's input LayerNormalization gradient in the backward.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "formats/error.h"
#include "planner/directives/directive.h"
#include "planner/directives/vocab_parallel.h"
#include "planner/ir/placement.h"

namespace piper::planner {
namespace {

using ir::Placement;

class Partitioner final : public PlacingGraph {
 public:
  Partitioner(const ir::OpGraph& graph, const strategy::ShardDirective& shard, int64_t parts,
              const DirectiveContext& context)
      : in_(graph), shard_(shard), parts_(parts), context_(context) {
    for (const ir::Tensor& tensor : in_.tensors()) add_tensor(tensor);
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
    place_parameters();
    for (ir::OpId id = 0; id < in_.num_ops(); ++id) place(in_.op(id));
    localize();
    out_.inputs = in_.inputs;
    out_.loss = in_.loss;
    out_.loss_seed = in_.loss_seed;
    out_.trained = in_.trained;
    out_.grad_norm = in_.grad_norm;
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
  // ones first, so that one all-reduce makes them whole rather than one each.
  ir::Op sum_partial_terms_first(ir::Op op) {
    std::vector<ir::TensorId> partial, whole;
    for (ir::TensorId in : op.inputs) (placement(in).is_partial() ? partial : whole).push_back(in);
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
  // after the sum: the fused bias becomes an Add that the product's all-reduce precedes.
  void place_unfused_linear(ir::Op op) {
    if (!ir::attr_string(op.attributes, "activation", "").empty() || op.outputs.size() > 1 ||
        ir::attr_float(op.attributes, "beta", 1.0) != 1.0) {
      throw Error(where("params") + ": the node '" + op.name +
                  "' splits its input dimension, so its product is a partial sum, but it fuses "
                  "an activation or scales its bias, which needs the whole sum; plan with "
                  "--no-fuse or split the layer along its output dimension");
    }
    const ir::TensorId y = op.outputs[0];
    const ir::TensorId bias = op.inputs[2];
    ir::Tensor product_tensor = fresh(y, "/product");
    const ir::TensorId product = add_tensor(std::move(product_tensor));
    op.inputs.resize(2);
    op.outputs = {product};
    ir::Op add;
    add.type = "Add";
    add.name = op.name + "/bias";
    add.inputs = {product, bias};
    add.outputs = {y};
    add.pass = op.pass;
    add.tags = op.tags;
    place_and_emit(std::move(op));
    place_and_emit(std::move(add));
  }

  void place_and_emit(ir::Op op) {
    const std::vector<Placement> given = given_placements(op);
    ir::OpPlacement decision = ir::place_op(out_, op, sequence_split(op, given), whole_, parts_);
    std::vector<std::pair<ir::TensorId, ir::TensorId>> redirected;  // (written, gradient)
    for (size_t j = 0; j < op.outputs.size(); ++j) {
      const ir::TensorId out = op.outputs[j];
      if (out < 0) continue;
      const Placement wanted = written_placement(out, decision.outputs[j]);
      if (wanted == decision.outputs[j]) continue;
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
      placement(op.outputs[j]) = decision.outputs[j];
      fixed_[op.outputs[j]] = true;
    }
    const ir::Op emitted = op;
    out_.add_op(std::move(op));
    for (const auto& [written, gradient] : redirected) {
      reshard_into(written, placement(written), written_placement(gradient, {}), emitted, gradient);
    }
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
  Placement written_placement(ir::TensorId tensor, const Placement& given) {
    const auto parameter = parameter_of_.find(tensor);
    if (parameter != parameter_of_.end()) return placement(parameter->second);
    if (fixed_[tensor]) return placement(tensor);
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
    const ir::TensorId result = convert(written, from, to, producer);
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
    if (from.is_sharded()) {
      const ir::TensorId moved = to_front(tensor, from.dim, consumer);
      const ir::TensorId whole = collective("piper.AllGather", moved, Placement{}, consumer);
      return convert(from_front(whole, from.dim, consumer), Placement{}, to, consumer);
    }
    if (from.is_partial() && to.is_replicated()) {
      return collective("piper.AllReduce", tensor, Placement{}, consumer);
    }
    const ir::TensorId moved = to_front(tensor, to.dim, consumer);
    const ir::TensorId block = from.is_partial() ? collective("piper.ReduceScatter", moved,
                                                              Placement::sharded(0), consumer)
                                                 : slice(moved, consumer);
    return from_front(block, to.dim, consumer);
  }

  ir::TensorId emit(const std::string& type, const std::string& suffix, ir::TensorId input,
                    ir::Tensor output, const Placement& placed, const ir::Op& consumer,
                    ir::Attributes attributes = {}) {
    output.placement = placed;
    const ir::TensorId out = add_tensor(std::move(output));
    fixed_[out] = true;
    ir::Op op;
    op.type = type;
    op.name = consumer.name + suffix;
    op.inputs = {input};
    op.outputs = {out};
    op.attributes = std::move(attributes);
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
    return emit(type, suffix, tensor, std::move(out), to, consumer);
  }

  // A whole tensor cut into this member's block along its first dimension.
  ir::TensorId slice(ir::TensorId tensor, const ir::Op& consumer) {
    ir::Tensor out = fresh(tensor, "/block");
    return emit("piper.Shard", "/tp_slice", tensor, std::move(out), Placement::sharded(0), consumer,
                {{"group", std::string("tensor")}, {"num_shards", parts_}});
  }

  // `tensor` with dimension `dim` moved to the front (a Transpose; none for dimension 0).
  ir::TensorId to_front(ir::TensorId tensor, int dim, const ir::Op& consumer) {
    if (dim == 0) return tensor;
    std::vector<int64_t> perm = {dim};
    for (int d = 0; d < static_cast<int>(whole_[tensor].size()); ++d) {
      if (d != dim) perm.push_back(d);
    }
    return transpose(tensor, perm, consumer);
  }

  // The inverse of to_front.
  ir::TensorId from_front(ir::TensorId tensor, int dim, const ir::Op& consumer) {
    if (dim == 0) return tensor;
    std::vector<int64_t> perm;
    for (int d = 1; d <= dim; ++d) perm.push_back(d);
    perm.push_back(0);
    for (int d = dim + 1; d < static_cast<int>(whole_[tensor].size()); ++d) perm.push_back(d);
    return transpose(tensor, perm, consumer);
  }

  ir::TensorId transpose(ir::TensorId tensor, const std::vector<int64_t>& perm,
                         const ir::Op& consumer) {
    ir::Tensor out = fresh(tensor, "/moved");
    for (size_t j = 0; j < perm.size(); ++j) out.shape[j] = whole_[tensor][perm[j]];
    Placement placed = placement(tensor);
    if (placed.is_sharded()) {
      placed.dim = static_cast<int>(std::find(perm.begin(), perm.end(), placed.dim) - perm.begin());
    }
    return emit("Transpose", "/tp_transpose", tensor, std::move(out), placed, consumer,
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
  const DirectiveContext& context_;
  ir::OpGraph out_;
  std::vector<ir::Shape> whole_;                       // per tensor of out_, until localize()
  std::vector<bool> fixed_;                            // placement decided: named, written or read
  std::vector<bool> produced_;                         // per tensor of in_: some op writes it
  std::map<ir::TensorId, ir::TensorId> parameter_of_;  // trained gradient -> parameter
  std::map<std::tuple<ir::TensorId, std::string, ir::Tags, ir::Pass>, ir::TensorId> cache_;
  std::map<std::string, int> names_;
  VocabParallel vocab_{*this};
};

}  // namespace

void apply_shard(ir::TaskGraph& graph, const DirectiveContext& context) {
  const auto& shard = std::get<strategy::ShardDirective>(context.directive.spec);
  if (shard.style == "expert") {
    throw Error(context.where("style") +
                ": expert parallelism is not planned yet; split experts as batched parameters "
                "with \"params\" once it is");
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
  ir::OpGraph partitioned = Partitioner(graph.op_graph(), shard, parts, context).run();
  graph = ir::build_task_graph(std::move(partitioned));
  for (const auto& group : shard.groups) {
    graph.shard_groups.emplace_back(group.begin(), group.end());
  }
}

}  // namespace piper::planner

namespace piper::planner {
namespace {

// Device -> the index of the group it leads.
using Leaders = std::map<int64_t, int64_t>;

int64_t group_of(const Leaders& leaders, int64_t device, const std::string& where,
                 const strategy::ShardDirective& shard) {
  const auto found = leaders.find(device);
  if (found != leaders.end()) return found->second;
  for (const auto& group : shard.groups) {
    if (std::find(group.begin(), group.end(), device) == group.end()) continue;
    throw Error(where + ": device " + std::to_string(device) +
                " is a member of a tensor-parallel group led by device " +
                std::to_string(group.front()) +
                "; other directives name a group by its first device (with a mesh, \"axis\" "
                "does)");
  }
  throw Error(where + ": device " + std::to_string(device) +
              " is in no group of the shard directive; every device must be in one");
}

}  // namespace

strategy::Strategy on_shard_groups(const strategy::Strategy& strategy) {
  std::vector<strategy::Directive> shards, others;
  for (const strategy::Directive& directive : strategy.directives) {
    (std::holds_alternative<strategy::ShardDirective>(directive.spec) ? shards : others)
        .push_back(directive);
  }
  if (shards.empty()) return strategy;
  if (shards.size() > 1) {
    throw Error(strategy.source + ": " + shards[1].path +
                ": a second shard directive; Piper plans one tensor-parallel split per "
                "strategy for now");
  }
  const auto& shard = std::get<strategy::ShardDirective>(shards[0].spec);
  Leaders leaders;
  for (size_t g = 0; g < shard.groups.size(); ++g) {
    leaders[shard.groups[g].front()] = static_cast<int64_t>(g);
  }
  strategy::Strategy result = strategy;
  result.directives = shards;
  for (strategy::Directive directive : others) {
    const std::string where = strategy.source + ": " + directive.path;
    const auto rename = [&](std::vector<int64_t>& devices) {
      for (int64_t& device : devices) device = group_of(leaders, device, where + ".devices", shard);
    };
    if (auto* place = std::get_if<strategy::PlaceDirective>(&directive.spec)) {
      rename(place->devices);
    } else if (auto* replicate = std::get_if<strategy::ReplicateDirective>(&directive.spec)) {
      rename(replicate->devices);
    } else if (auto* order = std::get_if<strategy::OrderDirective>(&directive.spec)) {
      if (order->device)
        order->device = group_of(leaders, *order->device, where + ".device", shard);
    }
    result.directives.push_back(std::move(directive));
  }
  return result;
}

}  // namespace piper::planner
