#include "planner/directives/expert_modules.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <stdexcept>

#include "formats/error.h"
#include "planner/ir/dynamic_dims.h"
#include "planner/ir/scalar_constant.h"

namespace piper::planner {
namespace {

// One exchange of rows to the experts of a slot: the total this member received and how many
// rows came from each member, which the exchanges aligned with it and the returns read.
struct Exchange {
  ir::TensorId total = -1;
  ir::TensorId rows_from = -1;
};

class ExpertSpreader {
 public:
  ExpertSpreader(const ir::OpGraph& in, int64_t group, const DirectiveContext& context)
      : in_(in),
        group_(group),
        context_(context),
        tag_(std::get<strategy::ShardDirective>(context.directive.spec).tag.value_or("")) {}

  ir::OpGraph run() {
    find_experts();
    for (const ir::Tensor& tensor : in_.tensors()) out_.add_tensor(tensor);
    for (const ir::TrainedParameter& trained : in_.trained) {
      parameter_of_[trained.gradient] = trained.parameter;
    }
    rewritten_.resize(static_cast<size_t>(in_.num_ops()));
    dropped_.assign(static_cast<size_t>(in_.num_ops()), false);
    for (size_t layer = 0; layer < instances_.front().size(); ++layer) {
      for (int64_t slot = 0; slot < per_member_; ++slot) spread(layer, slot);
    }
    emit_in_order();
    check_nothing_reads_a_dropped_expert();
    out_.keep_roles_of(in_);
    out_.replica_group = group_;
    std::erase_if(out_.trained, [&](const ir::TrainedParameter& trained) {
      return dropped_parameters_.count(trained.parameter) > 0;
    });
    try {
      ir::infer_dynamic_dims(out_);
    } catch (const Error& error) {
      throw Error(where() + ": spreading the experts: " + error.what());
    }
    return std::move(out_);
  }

 private:
  std::string where(const std::string& field = "") const { return context_.where(field); }

  std::string node(ir::OpId op) const { return "the node '" + in_.op(op).name + "'"; }

  // The experts' ops by number, each split into its instances (one per MoE layer), in op order.
  void find_experts() {
    std::map<int64_t, std::vector<ir::OpId>> by_expert;
    for (ir::OpId id = 0; id < in_.num_ops(); ++id) {
      const ir::Op& op = in_.op(id);
      if (op.attributes.count("expert")) {
        by_expert[ir::attr_int(op.attributes, "expert", 0)].push_back(id);
      }
    }
    if (by_expert.empty()) {
      throw Error(where("tag") + ": no ONNX node is tagged \"" + tag_ +
                  "\"; annotate each expert's nodes with its number, as {\"match\": "
                  "\"*/experts.0/*\", \"tags\": {\"" +
                  tag_ + "\": 0}}");
    }
    const auto experts = static_cast<int64_t>(by_expert.size());
    for (const auto& [expert, ops] : by_expert) {
      if (expert < 0 || expert >= experts) {
        throw Error(where("tag") + ": " + node(ops.front()) + " is tagged \"" + tag_ +
                    "\": " + std::to_string(expert) + ", but the " + std::to_string(experts) +
                    " experts tagged must be numbered 0 to " + std::to_string(experts - 1));
      }
    }
    if (experts % group_ != 0) {
      throw Error(where("tag") + ": the " + std::to_string(experts) + " experts tagged \"" + tag_ +
                  "\" do not spread evenly over groups of " + std::to_string(group_) +
                  " devices; choose a group size that divides the number of experts");
    }
    per_member_ = experts / group_;
    for (const auto& [expert, ops] : by_expert) instances_.push_back(split_instances(ops));
    for (size_t e = 1; e < instances_.size(); ++e) {
      if (instances_[e].size() != instances_[0].size()) {
        throw Error(where("tag") + ": expert " + std::to_string(e) + " has " +
                    std::to_string(instances_[e].size()) + " separate groups of nodes (one per " +
                    "MoE layer) and expert 0 has " + std::to_string(instances_[0].size()) +
                    "; every layer must have all the experts");
      }
    }
  }

  // The ops of one expert, grouped into what computes it in one layer: ops joined by the
  // activations one writes and another reads, and by the parameters and gradients they share.
  std::vector<std::vector<ir::OpId>> split_instances(const std::vector<ir::OpId>& ops) const {
    std::vector<size_t> parent(ops.size());
    std::iota(parent.begin(), parent.end(), size_t{0});
    const auto root = [&](size_t i) {
      while (parent[i] != i) i = parent[i] = parent[parent[i]];
      return i;
    };
    std::set<ir::TensorId> written;
    for (ir::OpId id : ops) {
      for (ir::TensorId out : in_.op(id).outputs) written.insert(out);
    }
    std::map<ir::TensorId, size_t> first_touch;
    for (size_t i = 0; i < ops.size(); ++i) {
      const ir::Op& op = in_.op(ops[i]);
      std::vector<ir::TensorId> touched = op.inputs;
      touched.insert(touched.end(), op.outputs.begin(), op.outputs.end());
      for (ir::TensorId t : touched) {
        if (t < 0) continue;
        const ir::Role role = in_.tensor(t).role;
        if (!written.count(t) && role != ir::Role::kParameter && role != ir::Role::kGradient) {
          continue;
        }
        const auto [found, added] = first_touch.emplace(t, i);
        if (!added) parent[root(i)] = root(found->second);
      }
    }
    std::map<size_t, std::vector<ir::OpId>> groups;  // root -> ops, keyed in order of first op
    std::map<size_t, size_t> order;
    for (size_t i = 0; i < ops.size(); ++i) {
      const size_t r = root(i);
      order.emplace(r, order.size());
      groups[order.at(r)].push_back(ops[i]);
    }
    std::vector<std::vector<ir::OpId>> instances;
    for (auto& [index, members] : groups) instances.push_back(std::move(members));
    return instances;
  }

  // Slot `slot` of layer `layer`: expert `slot`'s ops run for expert g·E/D + slot on member g.
  void spread(size_t layer, int64_t slot) {
    const std::vector<ir::OpId>& ops = instances_[static_cast<size_t>(slot)][layer];
    std::vector<const std::vector<ir::OpId>*> members;
    for (int64_t g = 0; g < group_; ++g) {
      members.push_back(&instances_[static_cast<size_t>(g * per_member_ + slot)][layer]);
      check_alike(ops, *members.back(), g * per_member_ + slot, slot);
    }
    const std::set<ir::OpId> own(ops.begin(), ops.end());
    std::set<ir::TensorId> inside;
    for (ir::OpId id : ops) {
      for (ir::TensorId out : in_.op(id).outputs) {
        if (out >= 0) inside.insert(out);
      }
    }
    std::map<ir::TensorId, ir::TensorId> replaced;  // what the slot reads instead
    for (size_t p = 0; p < ops.size(); ++p) {
      ir::Op op = in_.op(ops[p]);
      if (op.type == "Dropout") {
        throw Error(where("tag") + ": " + node(ops[p]) +
                    " is a Dropout inside an expert, whose mask Piper keys by the rows' place in "
                    "a replica's tensor, which spreading the experts changes; drop it from the "
                    "experts or train them unspread");
      }
      op.attributes.erase("expert");
      const auto counterparts = [&](bool input, size_t i) {
        std::vector<ir::TensorId> tensors;
        for (const auto* member : members) {
          const ir::Op& other = in_.op((*member)[p]);
          tensors.push_back(input ? other.inputs.at(i) : other.outputs.at(i));
        }
        return tensors;
      };
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const ir::TensorId t = op.inputs[i];
        if (t < 0) continue;
        if (replaced.count(t)) {
          op.inputs[i] = replaced.at(t);
          continue;
        }
        if (inside.count(t)) continue;
        const std::vector<ir::TensorId> pieces = counterparts(true, i);
        const ir::Role role = in_.tensor(t).role;
        const bool shared = std::all_of(pieces.begin(), pieces.end(),
                                        [&](ir::TensorId piece) { return piece == t; });
        if (shared) {
          if (parameter_of_gradient(t) || is_trained(t)) refuse_shared_parameter(ops[p], t);
          continue;
        }
        if (role == ir::Role::kParameter) {
          bind(t, pieces, members, p, slot);
        } else if (role == ir::Role::kActivation || role == ir::Role::kInput) {
          op.inputs[i] = replaced[t] = dispatched(t, pieces, members, p, slot, op);
        }
      }
      for (size_t o = 0; o < op.outputs.size(); ++o) {
        const ir::TensorId t = op.outputs[o];
        if (t < 0) continue;
        if (parameter_of_gradient(t)) {
          op.outputs[o] = scaled_gradient(t, ops[p], op);
        } else if (in_.tensor(t).role == ir::Role::kActivation && read_outside(t, own)) {
          const ir::TensorId rows = fresh(t, "/from_members");
          op.outputs[o] = replaced[t] = rows;
          returned(rows, counterparts(false, o), members, p, slot, ops[p], op);
        }
      }
      pending_.push_back({static_cast<double>(ops[p]), std::move(op)});
      rewritten_[static_cast<size_t>(ops[p])] = true;
    }
    for (ir::TensorId t : inside) {
      for (const ir::DynamicDim& dim : in_.tensor(t).dynamic) {
        out_.tensor(t).shape.at(static_cast<size_t>(dim.dim)) = ir::kUnknownDim;
      }
    }
    for (size_t g = 1; g < members.size(); ++g) {
      for (ir::OpId id : *members[g]) dropped_[static_cast<size_t>(id)] = true;
    }
  }

  // Expert `expert`'s ops of a layer compute what expert `slot`'s do, op by op.
  void check_alike(const std::vector<ir::OpId>& ops, const std::vector<ir::OpId>& other,
                   int64_t expert, int64_t slot) const {
    for (size_t p = 0; p < std::max(ops.size(), other.size()); ++p) {
      const bool alike = p < ops.size() && p < other.size() &&
                         in_.op(ops[p]).type == in_.op(other[p]).type &&
                         in_.op(ops[p]).inputs.size() == in_.op(other[p]).inputs.size() &&
                         in_.op(ops[p]).outputs.size() == in_.op(other[p]).outputs.size();
      if (alike) continue;
      const std::string first = p < ops.size() ? node(ops[p]) : "no node";
      const std::string second = p < other.size() ? node(other[p]) : "no node";
      throw Error(where("tag") + ": experts " + std::to_string(slot) + " and " +
                  std::to_string(expert) + " of one layer differ: " + first + " against " + second +
                  "; every expert of a layer must run the same ops");
    }
  }

  const ir::TrainedParameter* trained_of(ir::TensorId parameter) const {
    for (const ir::TrainedParameter& trained : in_.trained) {
      if (trained.parameter == parameter) return &trained;
    }
    return nullptr;
  }
  bool is_trained(ir::TensorId t) const { return trained_of(t) != nullptr; }
  bool parameter_of_gradient(ir::TensorId t) const { return parameter_of_.count(t) > 0; }

  [[noreturn]] void refuse_shared_parameter(ir::OpId op, ir::TensorId t) const {
    throw Error(where("tag") + ": " + node(op) + " reads '" + in_.tensor(t).name +
                "', a trained parameter every expert of its layer reads; an expert's ops read "
                "its own parameters only (leave the shared ones out of the experts' tags)");
  }

  // Member g loads expert g·E/D + slot's initializer where the slot reads `parameter`.
  void bind(ir::TensorId parameter, const std::vector<ir::TensorId>& pieces,
            const std::vector<const std::vector<ir::OpId>*>& members, size_t p, int64_t slot) {
    ir::Tensor& bound = out_.tensor(parameter);
    if (!bound.replica_initializers.empty()) return;
    const ir::Tensor& own = in_.tensor(parameter);
    for (size_t g = 0; g < pieces.size(); ++g) {
      const ir::Tensor& piece = in_.tensor(pieces[g]);
      if (piece.shape != own.shape || piece.dtype != own.dtype || piece.initializer.empty()) {
        throw Error(where("tag") + ": " + node((*members[g])[p]) + " reads '" + piece.name + "' " +
                    ir::to_string(piece.shape) + " where expert " + std::to_string(slot) +
                    "'s node reads '" + own.name + "' " + ir::to_string(own.shape) +
                    "; the experts of a layer must have parameters alike, from initializers");
      }
      bound.replica_initializers.push_back(piece.initializer);
      if (g > 0) dropped_parameters_.insert(pieces[g]);
    }
    bound.placed_over_replicas = true;
    if (const ir::TrainedParameter* trained = trained_of(parameter)) {
      out_.tensor(trained->gradient).placed_over_replicas = true;
    }
  }

  // The rows each piece holds at dimension 0 (scale 1): the count tensors of the exchange.
  std::vector<ir::TensorId> row_counts(const std::vector<ir::TensorId>& pieces,
                                       const std::vector<const std::vector<ir::OpId>*>& members,
                                       size_t p, int64_t slot, const std::string& verb) const {
    std::vector<ir::TensorId> counts;
    for (size_t g = 0; g < pieces.size(); ++g) {
      const ir::Tensor& piece = in_.tensor(pieces[g]);
      const bool rows =
          piece.dynamic.size() == 1 && piece.dynamic[0].dim == 0 && piece.dynamic[0].scale == 1;
      if (!rows) {
        throw Error(where("tag") + ": " + node((*members[g])[p]) + " (expert " +
                    std::to_string(static_cast<int64_t>(g) * per_member_ + slot) + ") " + verb +
                    " '" + piece.name + "' " + ir::describe_shape(in_, pieces[g]) +
                    ", which is not row-dynamic (its rows the tokens routed to the expert, a "
                    "run-time count); an expert's ops must read and write only such rows and "
                    "tensors every expert shares");
      }
      counts.push_back(piece.dynamic[0].extent);
    }
    return counts;
  }

  // The rows of `pieces` (piece g routed to member g's expert), exchanged: what member g
  // receives is every member's piece g, in member order.
  ir::TensorId dispatched(ir::TensorId t, const std::vector<ir::TensorId>& pieces,
                          const std::vector<const std::vector<ir::OpId>*>& members, size_t p,
                          int64_t slot, const ir::Op& reader) {
    const std::vector<ir::TensorId> counts = row_counts(pieces, members, p, slot, "reads");
    Exchange& exchange = exchanges_[counts];
    ir::Op op;
    op.type = "piper.AllToAllV";
    op.name = in_.tensor(t).name + "/all_to_all_v";
    op.inputs = pieces;
    op.inputs.insert(op.inputs.end(), counts.begin(), counts.end());
    const bool first = exchange.total < 0;
    if (first) {  // declared before the rows they size, as the IR's text form needs
      exchange.total = scalar_count(in_.tensor(t).name + "/rows_received", {});
      exchange.rows_from = scalar_count(in_.tensor(t).name + "/rows_from", {group_});
    }
    const ir::TensorId rows = fresh(t, "/to_experts");
    op.outputs = {rows};
    if (first) {
      op.outputs.push_back(exchange.total);
      op.outputs.push_back(exchange.rows_from);
    } else {
      op.inputs.push_back(exchange.total);
    }
    op.attributes["over"] = std::string("replicas");
    op.pass = reader.pass;
    op.tags = reader.tags;
    pending_.push_back({static_cast<double>((*members[0])[p]) - 0.5, std::move(op)});
    return rows;
  }

  // The slot's rows `rows` back to the members they came from, into `pieces`.
  void returned(ir::TensorId rows, const std::vector<ir::TensorId>& pieces,
                const std::vector<const std::vector<ir::OpId>*>& members, size_t p, int64_t slot,
                ir::OpId producer, const ir::Op& writer) {
    const std::vector<ir::TensorId> counts = row_counts(pieces, members, p, slot, "writes");
    const auto exchange = exchanges_.find(counts);
    if (exchange == exchanges_.end()) {
      throw Error(where("tag") + ": " + node(producer) + " writes '" + in_.tensor(pieces[0]).name +
                  "', whose rows are not those the expert's ops read (another run-time count)");
    }
    ir::Op op;
    op.type = "piper.AllToAllVReturn";
    op.name = writer.name + "/all_to_all_v_return";
    op.inputs = {rows, exchange->second.rows_from};
    op.inputs.insert(op.inputs.end(), counts.begin(), counts.end());
    op.outputs = pieces;
    op.attributes["over"] = std::string("replicas");
    op.pass = writer.pass;
    op.tags = writer.tags;
    pending_.push_back({static_cast<double>(producer) + 0.5, std::move(op)});
  }

  // The slot's gradient sums every member's rows of its expert; data parallelism averages
  // every other gradient over the replicas, so it is scaled to their mean.
  ir::TensorId scaled_gradient(ir::TensorId gradient, ir::OpId producer, const ir::Op& writer) {
    const ir::TensorId sum = fresh(gradient, "/members_sum");
    if (replica_scale_ < 0) {
      replica_scale_ = out_.add_tensor(
          ir::scalar_constant("expert_parallel/replica_mean", 1.0f / static_cast<float>(group_)));
    }
    ir::Op op;
    op.type = "Mul";
    op.name = writer.name + "/replica_mean";
    op.inputs = {sum, replica_scale_};
    op.outputs = {gradient};
    op.pass = writer.pass;
    op.tags = writer.tags;
    pending_.push_back({static_cast<double>(producer) + 0.25, std::move(op)});
    return sum;
  }

  ir::TensorId scalar_count(const std::string& name, const ir::Shape& shape) {
    ir::Tensor count;
    count.name = name;
    count.dtype = ir::DType::kInt64;
    count.shape = shape;
    return out_.add_tensor(std::move(count));
  }

  // A new activation like `like`, its run-time dimensions left for inference to size.
  ir::TensorId fresh(ir::TensorId like, const std::string& suffix) {
    const ir::Tensor& original = in_.tensor(like);
    ir::Tensor tensor;
    tensor.name = original.name + suffix;
    tensor.dtype = original.dtype;
    tensor.shape = original.shape;
    for (const ir::DynamicDim& dim : original.dynamic) {
      tensor.shape.at(static_cast<size_t>(dim.dim)) = ir::kUnknownDim;
    }
    return out_.add_tensor(std::move(tensor));
  }

  bool read_outside(ir::TensorId t, const std::set<ir::OpId>& own) const {
    for (ir::OpId consumer : in_.consumers(t)) {
      if (!own.count(consumer)) return true;
    }
    return false;
  }

  // The kept, rewritten and added ops in an order where every producer comes first, otherwise
  // as close to the original order as the exchanges allow (an exchange waits for every piece).
  void emit_in_order() {
    for (ir::OpId id = 0; id < in_.num_ops(); ++id) {
      if (!dropped_[static_cast<size_t>(id)] && !rewritten_[static_cast<size_t>(id)]) {
        pending_.push_back({static_cast<double>(id), in_.op(id)});
      }
    }
    std::map<ir::TensorId, size_t> producer;
    for (size_t i = 0; i < pending_.size(); ++i) {
      for (ir::TensorId out : pending_[i].op.outputs) {
        if (out >= 0) producer[out] = i;
      }
    }
    std::vector<int> waiting(pending_.size(), 0);
    std::vector<std::vector<size_t>> readers(pending_.size());
    for (size_t i = 0; i < pending_.size(); ++i) {
      for (ir::TensorId in : pending_[i].op.inputs) {
        const auto found = producer.find(in);
        if (in < 0 || found == producer.end()) continue;
        ++waiting[i];
        readers[found->second].push_back(i);
      }
    }
    using Ready = std::pair<double, size_t>;
    std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (waiting[i] == 0) ready.push({pending_[i].key, i});
    }
    size_t emitted = 0;
    while (!ready.empty()) {
      const size_t i = ready.top().second;
      ready.pop();
      out_.add_op(pending_[i].op);
      ++emitted;
      for (size_t reader : readers[i]) {
        if (--waiting[reader] == 0) ready.push({pending_[reader].key, reader});
      }
    }
    if (emitted != pending_.size()) {
      throw std::logic_error(where() + ": spreading the experts left ops in a cycle");
    }
  }

  // An op kept reads nothing only a dropped expert's op wrote: the slot's ops return it.
  void check_nothing_reads_a_dropped_expert() const {
    std::set<ir::TensorId> written;
    for (const ir::Op& op : out_.ops()) {
      for (ir::TensorId out : op.outputs) written.insert(out);
    }
    for (const ir::Op& op : out_.ops()) {
      for (ir::TensorId in : op.inputs) {
        if (in < 0 || written.count(in) || in >= in_.num_tensors() || in_.producer(in) < 0) {
          continue;
        }
        throw Error(where("tag") + ": the node '" + op.name + "' reads '" + in_.tensor(in).name +
                    "', which " + node(in_.producer(in)) +
                    " computes for another member's expert, where the slot's own expert's "
                    "counterpart is not read outside the expert; tag the node that reads it "
                    "as the expert's, or leave it out of the expert");
      }
    }
  }

  struct Pending {
    double key = 0;  // the original op's place; an exchange goes just before or after it
    ir::Op op;
  };

  const ir::OpGraph& in_;
  const int64_t group_;
  const DirectiveContext& context_;
  const std::string tag_;
  ir::OpGraph out_;
  int64_t per_member_ = 1;
  std::vector<std::vector<std::vector<ir::OpId>>> instances_;  // [expert][layer] -> ops
  std::map<ir::TensorId, ir::TensorId> parameter_of_;          // trained gradient -> parameter
  std::vector<bool> rewritten_;                                // per op of in_: a slot's op
  std::vector<bool> dropped_;  // per op of in_: another member's expert's
  std::set<ir::TensorId> dropped_parameters_;
  std::map<std::vector<ir::TensorId>, Exchange> exchanges_;  // by the pieces' count tensors
  std::vector<Pending> pending_;
  ir::TensorId replica_scale_ = -1;
};

}  // namespace

ir::OpGraph spread_expert_modules(const ir::OpGraph& graph, int64_t group,
                                  const DirectiveContext& context) {
  return ExpertSpreader(graph, group, context).run();
}

}  // namespace piper::planner
