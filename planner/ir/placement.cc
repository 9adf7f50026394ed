#include "planner/ir/placement.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "formats/einsum.h"
#include "formats/error.h"

namespace piper::ir {
namespace {

using Placements = std::vector<Placement>;

// The op being placed, with its inputs' given placements and whole shapes.
struct Site {
  const OpGraph& graph;
  const Op& op;
  const Placements& given;
  const std::vector<Shape>& whole;
  int64_t group_size;
  const Placements* preferred;  // outputs' preferred placements, or null

  size_t num_inputs() const { return op.inputs.size(); }
  bool has_input(size_t i) const { return i < op.inputs.size() && op.inputs[i] >= 0; }
  const Shape& input_shape(size_t i) const { return whole.at(op.inputs.at(i)); }
  const Shape& output_shape(size_t j) const { return whole.at(op.outputs.at(j)); }
  int input_rank(size_t i) const { return static_cast<int>(input_shape(i).size()); }
  int output_rank(size_t j) const { return static_cast<int>(output_shape(j).size()); }
  const Placement& in(size_t i) const { return given.at(i); }
  // Whether input i's dimension `dim` is broadcast against `extent` (size 1 against more, or
  // against 1 unless it is split there already): it is then read whole, not split.
  bool broadcast(size_t i, int dim, int64_t extent) const {
    return input_shape(i)[dim] == 1 && (extent != 1 || in(i) != Placement::sharded(dim));
  }
  bool prefers(size_t j, const Placement& placement) const {
    return preferred != nullptr && j < preferred->size() && (*preferred)[j] == placement;
  }

  // Every input whole and every output whole: what an op without a rule needs.
  OpPlacement replicated() const {
    return {Placements(num_inputs()), Placements(op.outputs.size())};
  }
  // Inputs as given, every output `out`.
  OpPlacement keep_inputs(const Placement& out) const {
    return {given, Placements(op.outputs.size(), out)};
  }
  // The first input as `in` and the first output as `out`, the others whole.
  OpPlacement first(const Placement& in, const Placement& out) const {
    OpPlacement result = replicated();
    result.inputs[0] = in;
    result.outputs[0] = out;
    return result;
  }
};

int normalize_axis(int64_t axis, int rank) {
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// ---- element-wise ops -------------------------------------------------------------------

// How an element-wise op treats partial sums: linear in all inputs jointly (a sum of partial
// sums is the partial sum of the sum), linear in one input when the others are whole (a
// product), or not at all.
enum class Linearity { kNone, kJoint, kSingle };

struct Elementwise {
  Linearity linearity = Linearity::kNone;
  std::vector<size_t> linear_inputs;  // kSingle: the inputs it is linear in
};

const std::map<std::string, Elementwise>& elementwise_ops() {
  static const std::map<std::string, Elementwise> table = [] {
    std::map<std::string, Elementwise> t;
    for (const char* op : {"Add", "Sub", "Sum", "Neg", "Identity", "piper.Accumulate"}) {
      t[op] = {Linearity::kJoint, {}};
    }
    t["Mul"] = {Linearity::kSingle, {0, 1}};
    t["Div"] = {Linearity::kSingle, {0}};
    for (const char* op : {"Abs",         "Relu",        "LeakyRelu",
                           "Gelu",        "Sigmoid",     "Tanh",
                           "Erf",         "Exp",         "Log",
                           "Sqrt",        "Reciprocal",  "Softplus",
                           "Elu",         "Selu",        "Celu",
                           "HardSigmoid", "HardSwish",   "Softsign",
                           "Sin",         "Cos",         "Tan",
                           "Sinh",        "Cosh",        "Asin",
                           "Acos",        "Atan",        "Asinh",
                           "Acosh",       "Atanh",       "Sign",
                           "Floor",       "Ceil",        "Round",
                           "Pow",         "Max",         "Min",
                           "Where",       "Equal",       "Less",
                           "Greater",     "LessOrEqual", "GreaterOrEqual",
                           "Not",         "And",         "Or",
                           "Xor",         "IsNaN",       "IsInf",
                           "Clip",        "Mod",         "ThresholdedRelu",
                           "Mish",        "PRelu",       "Dropout"}) {
      t[op] = {};
    }
    // Gradients dX = dY * f(...) are linear in dY.
    for (const char* op :
         {"piper.ReluGrad",       "piper.TanhGrad",        "piper.SigmoidGrad",
          "piper.PowBaseGrad",    "piper.PowExponentGrad", "piper.SqrtGrad",
          "piper.ReciprocalGrad", "piper.ErfGrad",         "piper.AbsGrad",
          "piper.LeakyReluGrad",  "piper.SoftplusGrad",    "piper.EluGrad",
          "piper.SeluGrad",       "piper.CeluGrad",        "piper.HardSigmoidGrad",
          "piper.HardSwishGrad",  "piper.SoftsignGrad",    "piper.ThresholdedReluGrad",
          "piper.SinGrad",        "piper.CosGrad",         "piper.TanGrad",
          "piper.SinhGrad",       "piper.CoshGrad",        "piper.AsinGrad",
          "piper.AcosGrad",       "piper.AtanGrad",        "piper.AsinhGrad",
          "piper.AcoshGrad",      "piper.AtanhGrad",       "piper.ClipGrad",
          "piper.MaxMinGrad",     "piper.DropoutGrad",     "piper.GeluGrad",
          "piper.MishGrad",       "piper.PReluGrad"}) {
      t[op] = {Linearity::kSingle, {0}};
    }
    return t;
  }();
  return table;
}

// Broadcasting element-wise: a dimension sharded in one input is sharded in the output and in
// every input that has it (a size-1 dimension broadcasts whole); partial sums pass through
// the op's linear inputs.
OpPlacement place_elementwise(const Site& site, const Elementwise& kind) {
  const int rank = site.output_rank(0);
  int sharded = -1;  // in the output's numbering
  for (size_t i = 0; i < site.num_inputs() && sharded < 0; ++i) {
    if (site.has_input(i) && site.in(i).is_sharded()) {
      sharded = site.in(i).dim + rank - site.input_rank(i);
    }
  }
  OpPlacement result = site.replicated();
  if (sharded >= 0) {
    for (size_t i = 0; i < site.num_inputs(); ++i) {
      if (!site.has_input(i)) continue;
      const int dim = sharded - (rank - site.input_rank(i));
      if (dim >= 0 && !site.broadcast(i, dim, site.output_shape(0)[sharded])) {
        result.inputs[i] = Placement::sharded(dim);
      }
    }
    for (size_t j = 0; j < site.op.outputs.size(); ++j) {
      if (site.op.outputs[j] >= 0 && site.output_rank(j) == rank) {
        result.outputs[j] = Placement::sharded(sharded);
      }
    }
    return result;
  }
  std::vector<size_t> partial;
  for (size_t i = 0; i < site.num_inputs(); ++i) {
    if (site.has_input(i) && site.in(i).is_partial()) partial.push_back(i);
  }
  if (partial.empty()) return result;
  size_t present = 0;
  for (size_t i = 0; i < site.num_inputs(); ++i) present += site.has_input(i);
  const bool joint = kind.linearity == Linearity::kJoint && partial.size() == present;
  const bool single =
      kind.linearity == Linearity::kSingle && partial.size() == 1 &&
      std::count(kind.linear_inputs.begin(), kind.linear_inputs.end(), partial[0]) > 0;
  // A Cast to as wide a float dtype is the partial sum of the casts; a Cast to bfloat16
  // rounds, which only the whole sum may be (the members' rounded terms add up to another
  // value than one process rounds).
  const auto float_cast = [&] {
    if (site.op.type != "Cast") return false;
    const DType from = site.graph.tensor(site.op.inputs[0]).dtype;
    const DType to = site.graph.tensor(site.op.outputs[0]).dtype;
    return is_float(to) && is_float(from) && !(to == DType::kBFloat16 && from == DType::kFloat32);
  };
  if (!joint && !single && !float_cast()) return result;
  for (size_t i : partial) result.inputs[i] = Placement::partial();
  for (Placement& out : result.outputs) out = Placement::partial();
  return result;
}

// ---- matrix products --------------------------------------------------------------------

// One way to place a product: what each operand needs and what the product is.
struct Candidate {
  Placement a, b, y;
};

// The number of reshards `candidate` needs given the operands' placements: a whole tensor cut
// into blocks costs little (a local slice), anything else a collective; a partial sum
// cannot be made out of anything else.
double reshard_cost(const Placement& given, const Placement& needed) {
  if (given == needed) return 0;
  if (needed.is_partial()) return std::numeric_limits<double>::infinity();
  return given.is_replicated() ? 0.25 : 1;
}

// MatMul, Gemm and piper.MatMul: A [..., m, k] times B [..., k, n] (after transA / transB),
// batch dimensions broadcast, plus a bias (Gemm's C, piper.MatMul's Bias) broadcast to the
// product. A sharded contraction gives a partial sum (without a bias: it would be added on
// every member); rows of A, columns of B and batch dimensions stay sharded in the product, and
// the bias splits with them where it has their dimension.
OpPlacement place_matmul(const Site& site) {
  if (site.input_rank(0) < 2 || site.input_rank(1) < 2) return site.replicated();
  const bool trans_a = attr_int(site.op.attributes, "transA", 0) != 0;
  const bool trans_b = attr_int(site.op.attributes, "transB", 0) != 0;
  const int ra = site.input_rank(0), rb = site.input_rank(1), ry = site.output_rank(0);
  const int m = trans_a ? ra - 1 : ra - 2, ka = trans_a ? ra - 2 : ra - 1;
  const int kb = trans_b ? rb - 1 : rb - 2, n = trans_b ? rb - 2 : rb - 1;
  const bool has_bias = site.has_input(2);
  std::vector<Candidate> candidates;
  if (!has_bias) {
    candidates.push_back({Placement::sharded(ka), Placement::sharded(kb), Placement::partial()});
  }
  // B's columns before A's rows: at equal cost, the weights (B, as Linear layers write them)
  // stay split and the activations move, as Megatron's sequence parallelism gathers them.
  candidates.push_back({{}, Placement::sharded(n), Placement::sharded(ry - 1)});
  candidates.push_back({Placement::sharded(m), {}, Placement::sharded(ry - 2)});
  // A batch dimension sharded in either operand: both split it where they have it.
  for (size_t operand = 0; operand < 2; ++operand) {
    const Placement& given = site.in(operand);
    const int rank = site.input_rank(operand);
    if (!given.is_sharded() || given.dim >= rank - 2) continue;
    const int dim = given.dim + ry - rank;
    Candidate batch{{}, {}, Placement::sharded(dim)};
    const int da = dim - (ry - ra), db = dim - (ry - rb);
    const int64_t extent = site.output_shape(0)[dim];
    if (da >= 0 && !site.broadcast(0, da, extent)) batch.a = Placement::sharded(da);
    if (db >= 0 && !site.broadcast(1, db, extent)) batch.b = Placement::sharded(db);
    candidates.push_back(batch);
  }
  if (!has_bias) {
    candidates.push_back({Placement::partial(), {}, Placement::partial()});
    candidates.push_back({{}, Placement::partial(), Placement::partial()});
  }
  candidates.push_back({});
  const Candidate* best = nullptr;
  double best_cost = std::numeric_limits<double>::infinity();
  for (const Candidate& candidate : candidates) {
    const double cost =
        reshard_cost(site.in(0), candidate.a) + reshard_cost(site.in(1), candidate.b);
    if (cost < best_cost) {
      best = &candidate;
      best_cost = cost;
    }
  }
  OpPlacement result = site.replicated();
  result.inputs[0] = best->a;
  result.inputs[1] = best->b;
  if (has_bias && best->y.is_sharded()) {
    const int dim = best->y.dim - (ry - site.input_rank(2));
    if (dim >= 0 && site.input_shape(2)[dim] != 1) result.inputs[2] = Placement::sharded(dim);
  }
  for (size_t j = 0; j < site.op.outputs.size(); ++j) {
    if (site.op.outputs[j] >= 0) result.outputs[j] = best->y;
  }
  return result;
}

// A trained parameter, or its cast to another precision.
bool is_parameter(const OpGraph& graph, TensorId tensor) {
  if (graph.tensor(tensor).role == Role::kParameter) return true;
  const OpId producer = graph.producer(tensor);
  return producer >= 0 && graph.op(producer).type == "Cast" &&
         is_parameter(graph, graph.op(producer).inputs.at(0));
}

// Einsum (GSPMD's dot rule, generalized): a label sharded in one operand is sharded in every
// operand that has it, and in the output if it survives there (a partial sum if it is summed
// away); one partial operand with the others whole gives a partial output (einsum is linear in
// each). Among the labels the operands shard, the cheapest reshard wins; moving an operand
// costs more when it is a parameter, so that expert weights sharded along their experts stay
// put and the tokens travel to them (GShard), and a whole output beats a partial one.
OpPlacement place_einsum(const Site& site) {
  std::vector<size_t> ranks;
  for (size_t i = 0; i < site.num_inputs(); ++i) ranks.push_back(site.input_shape(i).size());
  const auto attribute = site.op.attributes.find("equation");
  if (attribute == site.op.attributes.end() ||
      !std::holds_alternative<std::string>(attribute->second)) {
    return site.replicated();
  }
  const formats::EinsumEquation equation =
      formats::parse_einsum(std::get<std::string>(attribute->second), ranks);
  std::vector<int> labels;  // candidate labels, in order of appearance
  for (size_t i = 0; i < site.num_inputs(); ++i) {
    if (site.in(i).is_sharded()) labels.push_back(equation.inputs[i].at(site.in(i).dim));
  }
  if (site.preferred != nullptr && !site.preferred->empty() && (*site.preferred)[0].is_sharded()) {
    labels.push_back(equation.output.at((*site.preferred)[0].dim));
  }
  const auto position = [](const std::vector<int>& term, int label) {
    const auto found = std::find(term.begin(), term.end(), label);
    return found == term.end() ? -1 : static_cast<int>(found - term.begin());
  };
  std::map<int, int64_t> extents;
  for (size_t i = 0; i < site.num_inputs(); ++i) {
    for (size_t d = 0; d < equation.inputs[i].size(); ++d) {
      int64_t& extent = extents[equation.inputs[i][d]];
      extent = std::max(extent, site.input_shape(i)[d]);
    }
  }
  std::vector<OpPlacement> candidates;
  for (int label : labels) {
    OpPlacement candidate = site.replicated();
    bool divides = true;
    for (size_t i = 0; i < site.num_inputs(); ++i) {
      const int dim = position(equation.inputs[i], label);
      if (dim < 0 || site.broadcast(i, dim, extents.at(label))) continue;
      divides = divides && site.input_shape(i)[dim] % site.group_size == 0;
      candidate.inputs[i] = Placement::sharded(dim);
    }
    const int out = position(equation.output, label);
    candidate.outputs[0] = out >= 0 ? Placement::sharded(out) : Placement::partial();
    if (divides) candidates.push_back(std::move(candidate));
  }
  std::vector<size_t> partial;
  for (size_t i = 0; i < site.num_inputs(); ++i) {
    if (site.in(i).is_partial()) partial.push_back(i);
  }
  if (partial.size() == 1) {
    OpPlacement candidate = site.replicated();
    candidate.inputs[partial[0]] = Placement::partial();
    candidate.outputs[0] = Placement::partial();
    candidates.push_back(std::move(candidate));
  }
  candidates.push_back(site.replicated());
  const auto cost = [&](const OpPlacement& candidate) {
    double total = candidate.outputs[0].is_partial() ? 0.5 : 0;
    for (size_t i = 0; i < site.num_inputs(); ++i) {
      const double moved = reshard_cost(site.in(i), candidate.inputs[i]);
      const bool parameter = is_parameter(site.graph, site.op.inputs[i]);
      total += moved * (parameter && moved >= 1 ? 2 : 1);
    }
    return total - (site.prefers(0, candidate.outputs[0]) ? 0.75 : 0);
  };
  return *std::min_element(
      candidates.begin(), candidates.end(),
      [&](const OpPlacement& a, const OpPlacement& b) { return cost(a) < cost(b); });
}

// ---- layout ops -------------------------------------------------------------------------

// Where a block along `dim` of a tensor of shape `from` lies once it is reshaped to `to`
// (same elements, row-major): the dimension of `to` whose leading elements match, if the
// blocks stay whole blocks of it; -1 when no dimension of `to` carries them.
int reshaped_dim(const Shape& from, int dim, const Shape& to, int64_t parts) {
  int64_t before = 1;
  for (int d = 0; d < dim; ++d) before *= from[d];
  int64_t prefix = 1;
  for (size_t j = 0; j < to.size(); ++j) {
    if (prefix == before && to[j] % parts == 0 && to[j] >= parts) {
      // The blocks of `from` along `dim` hold from[dim] / parts rows of what follows; those of
      // `to` along j hold to[j] / parts: equal when both cover the same trailing elements.
      int64_t after_from = 1, after_to = 1;
      for (size_t d = dim + 1; d < from.size(); ++d) after_from *= from[d];
      for (size_t d = j + 1; d < to.size(); ++d) after_to *= to[d];
      if (from[dim] * after_from == to[j] * after_to) return static_cast<int>(j);
    }
    prefix *= to[j];
    if (prefix > before) break;
  }
  return -1;
}

// Reshape, Flatten, Squeeze, Unsqueeze: a sharded dimension moves to where its blocks land;
// where they do not stay whole blocks of one dimension (heads that do not divide over the
// group), the input is gathered first.
OpPlacement place_reshape(const Site& site) {
  const Placement& x = site.in(0);
  if (x.is_partial()) return site.first(x, x);
  if (!x.is_sharded()) return site.replicated();
  // Unsqueeze's new dimensions hold nothing of the split one, even where a size-1 dimension
  // before it could hold its blocks (a group of one: ir::replica_placements).
  const auto axes = site.op.type != "Unsqueeze" ? std::nullopt
                    : site.has_input(1)         ? constant_ints(site.graph, site.op.inputs[1])
                                                : attr_ints(site.op.attributes, "axes");
  if (axes) {
    std::set<int> inserted;
    for (int64_t axis : *axes) inserted.insert(normalize_axis(axis, site.output_rank(0)));
    for (int j = 0, seen = 0; j < site.output_rank(0); ++j) {
      if (!inserted.count(j) && seen++ == x.dim) return site.first(x, Placement::sharded(j));
    }
  }
  const int dim = reshaped_dim(site.input_shape(0), x.dim, site.output_shape(0), site.group_size);
  return dim >= 0 ? site.first(x, Placement::sharded(dim)) : site.replicated();
}

// Slice (and its adjoint), Concat and Split along other dimensions than a split one keep it
// split: rotary embeddings slice and concatenate each head's features, with the heads split.
OpPlacement place_slice(const Site& site) {
  const Placement& x = site.in(0);
  if (!x.is_sharded()) return x.is_partial() ? site.first(x, x) : site.replicated();
  std::vector<int64_t> axes;
  const auto starts = constant_ints(site.graph, site.op.inputs.at(1));
  const auto given_axes = site.has_input(3) ? constant_ints(site.graph, site.op.inputs[3])
                                            : std::optional<std::vector<int64_t>>{};
  if (!starts || (site.has_input(3) && !given_axes)) return site.replicated();
  if (given_axes) {
    axes = *given_axes;
  } else {
    for (size_t d = 0; d < starts->size(); ++d) axes.push_back(static_cast<int64_t>(d));
  }
  for (int64_t axis : axes) {
    if (normalize_axis(axis, site.input_rank(0)) == x.dim) return site.replicated();
  }
  return site.first(x, x);
}

OpPlacement place_concat_or_split(const Site& site) {
  const int rank = site.op.type == "Concat" ? site.output_rank(0) : site.input_rank(0);
  const int axis = normalize_axis(attr_int(site.op.attributes, "axis", 0), rank);
  int sharded = -1;
  for (size_t i = 0; i < site.num_inputs(); ++i) {
    if (site.has_input(i) && site.in(i).is_sharded() && site.input_rank(i) == rank) {
      sharded = site.in(i).dim;
    }
  }
  OpPlacement result = site.replicated();
  if (sharded < 0 || sharded == axis) return result;
  const size_t data_inputs = site.op.type == "Concat" ? site.num_inputs() : 1;
  for (size_t i = 0; i < data_inputs; ++i) {
    if (site.has_input(i)) result.inputs[i] = Placement::sharded(sharded);
  }
  for (size_t j = 0; j < site.op.outputs.size(); ++j) {
    if (site.op.outputs[j] >= 0) result.outputs[j] = Placement::sharded(sharded);
  }
  return result;
}

OpPlacement place_transpose(const Site& site) {
  const Placement& x = site.in(0);
  if (!x.is_sharded()) return site.keep_inputs(x);
  std::vector<int64_t> perm = attr_ints(site.op.attributes, "perm");
  if (perm.empty()) {
    for (int d = site.input_rank(0) - 1; d >= 0; --d) perm.push_back(d);
  }
  for (size_t j = 0; j < perm.size(); ++j) {
    if (perm[j] == x.dim) return site.keep_inputs(Placement::sharded(static_cast<int>(j)));
  }
  return site.replicated();
}

// Expand and piper.BroadcastTo: the input's dimensions land right-aligned in the output
// (BroadcastTo first inserts size-1 dimensions at `axes`); both are linear.
OpPlacement place_broadcast(const Site& site) {
  const Placement& x = site.in(0);
  if (x.is_partial()) return site.first(x, x);
  if (!x.is_sharded()) return site.replicated();
  int dim = x.dim + site.output_rank(0) - site.input_rank(0);
  if (site.op.type == "piper.BroadcastTo") {
    std::set<int64_t> inserted;
    for (int64_t axis : attr_ints(site.op.attributes, "axes")) inserted.insert(axis);
    dim = -1;
    for (int j = 0, seen = 0; j < site.output_rank(0); ++j) {
      if (inserted.count(j)) continue;
      if (seen++ == x.dim) dim = j;
    }
  }
  return site.first(x, Placement::sharded(dim));
}

// ---- reductions and normalizations ------------------------------------------------------

std::vector<int> reduced_axes(const Site& site) {
  std::vector<int64_t> axes = attr_ints(site.op.attributes, "axes");
  if (site.has_input(1)) {
    const auto values = constant_ints(site.graph, site.op.inputs[1]);
    if (values) axes = *values;
  }
  const int rank = site.input_rank(0);
  std::vector<int> result;
  for (int64_t axis : axes) result.push_back(normalize_axis(axis, rank));
  if (axes.empty() && attr_int(site.op.attributes, "noop_with_empty_axes", 0) == 0) {
    for (int d = 0; d < rank; ++d) result.push_back(d);
  }
  return result;
}

// ReduceSum and ReduceMean are linear; a sum over a sharded dimension is a partial sum.
OpPlacement place_reduce(const Site& site) {
  const Placement& x = site.in(0);
  const bool sum = site.op.type == "ReduceSum";
  const bool linear = sum || site.op.type == "ReduceMean";
  if (x.is_partial() && linear) return site.first(x, x);
  if (!x.is_sharded()) return site.replicated();
  const std::vector<int> axes = reduced_axes(site);
  if (std::count(axes.begin(), axes.end(), x.dim) > 0) {
    return sum ? site.first(x, Placement::partial()) : site.replicated();
  }
  int dim = x.dim;
  if (attr_int(site.op.attributes, "keepdims", 1) == 0) {
    dim -= static_cast<int>(
        std::count_if(axes.begin(), axes.end(), [&](int axis) { return axis < x.dim; }));
  }
  return site.first(x, Placement::sharded(dim));
}

// piper.SumTo: sums down to the output's shape; a sharded dimension summed away is partial.
OpPlacement place_sum_to(const Site& site) {
  const Placement& x = site.in(0);
  if (!x.is_sharded()) return site.keep_inputs(x);
  const int dim = x.dim - (site.input_rank(0) - site.output_rank(0));
  const bool kept = dim >= 0 && site.output_shape(0)[dim] == site.input_shape(0)[x.dim];
  return site.keep_inputs(kept ? Placement::sharded(dim) : Placement::partial());
}

// Softmax and LogSoftmax (and their gradients, linear in dY) along `axis`.
OpPlacement place_softmax(const Site& site, bool gradient) {
  const int axis = normalize_axis(attr_int(site.op.attributes, "axis", -1), site.input_rank(0));
  OpPlacement result = site.replicated();
  int sharded = -1;
  for (size_t i = 0; i < site.num_inputs(); ++i) {
    if (site.in(i).is_sharded() && site.in(i).dim != axis) sharded = site.in(i).dim;
  }
  if (sharded >= 0) {
    result.inputs.assign(site.num_inputs(), Placement::sharded(sharded));
    result.outputs.assign(site.op.outputs.size(), Placement::sharded(sharded));
  } else if (gradient && site.in(0).is_partial() && site.in(1).is_replicated()) {
    result.inputs[0] = Placement::partial();
    result.outputs[0] = Placement::partial();
  }
  return result;
}

// LayerNormalization normalizes the dimensions from `axis` on: any before it may be sharded.
OpPlacement place_layer_norm(const Site& site) {
  const int axis = normalize_axis(attr_int(site.op.attributes, "axis", -1), site.input_rank(0));
  const Placement& x = site.in(0);
  OpPlacement result = site.replicated();
  if (x.is_sharded() && x.dim < axis) {
    result.inputs[0] = x;
    for (Placement& out : result.outputs) out = x;
  }
  return result;
}

// piper.LayerNormalizationGrad (dY, X, Scale, Mean, InvStdDev -> dX, dScale, dBias): rows
// sharded like the forward; the scale's and bias's gradients then sum over members' rows.
OpPlacement place_layer_norm_grad(const Site& site) {
  const int axis = normalize_axis(attr_int(site.op.attributes, "axis", -1), site.input_rank(1));
  const Placement& x = site.in(1);
  OpPlacement result = site.replicated();
  if (x.is_sharded() && x.dim < axis) {
    for (size_t i : {0, 1, 3, 4}) {
      if (site.has_input(i)) result.inputs[i] = x;
    }
    result.outputs = {x, Placement::partial(), Placement::partial()};
    result.outputs.resize(site.op.outputs.size());
  }
  return result;
}

// ---- gathers, attention, fused ops ------------------------------------------------------

// Gather (data, indices): data sharded off `axis` stays sharded; indices sharded shard the
// output's index dimensions; a partial table gives partial rows.
OpPlacement place_gather(const Site& site) {
  const int axis = normalize_axis(attr_int(site.op.attributes, "axis", 0), site.input_rank(0));
  const Placement& data = site.in(0);
  const Placement& indices = site.in(1);
  const int index_rank = site.input_rank(1);
  if (data.is_sharded() && data.dim != axis && indices.is_replicated()) {
    return site.first(data,
                      Placement::sharded(data.dim < axis ? data.dim : data.dim + index_rank - 1));
  }
  if (data.is_partial() && indices.is_replicated()) return site.first(data, data);
  OpPlacement result = site.replicated();
  if (data.is_replicated() && indices.is_sharded()) {
    result.inputs[1] = indices;
    result.outputs[0] = Placement::sharded(axis + indices.dim);
  }
  return result;
}

// piper.GatherGrad (dY, indices -> dX): the adjoint of Gather's placements.
OpPlacement place_gather_grad(const Site& site) {
  const int data_rank = site.output_rank(0);
  const int axis = normalize_axis(attr_int(site.op.attributes, "axis", 0), data_rank);
  const int index_rank = site.input_rank(1);
  const Placement& dy = site.in(0);
  if (dy.is_partial() || (dy.is_sharded() && dy.dim < axis)) return site.first(dy, dy);
  if (!dy.is_sharded()) return site.replicated();
  if (dy.dim >= axis + index_rank) {
    return site.first(dy, Placement::sharded(dy.dim - index_rank + 1));
  }
  // Each member scatters its own rows: the table gradient sums over members.
  OpPlacement result = site.first(dy, Placement::partial());
  result.inputs[1] = Placement::sharded(dy.dim - axis);
  return result;
}

// TopK (X, K), ArgMax and ArgMin (X) along `axis`, and CumSum (X, axis): rows off the axis are
// independent.
OpPlacement place_along_axis(const Site& site) {
  const Placement& x = site.in(0);
  const bool arg = site.op.type == "ArgMax" || site.op.type == "ArgMin";
  int axis = static_cast<int>(attr_int(site.op.attributes, "axis", arg ? 0 : -1));
  if (site.op.type == "CumSum") {
    const auto given = site.has_input(1) ? constant_ints(site.graph, site.op.inputs[1])
                                         : std::optional<std::vector<int64_t>>{};
    if (!given || given->size() != 1) return site.replicated();
    axis = static_cast<int>(given->front());
  }
  if (!x.is_sharded() || x.dim == normalize_axis(axis, site.input_rank(0))) {
    return site.replicated();
  }
  const bool dropped = arg && attr_int(site.op.attributes, "keepdims", 1) == 0 &&
                       x.dim > normalize_axis(axis, site.input_rank(0));
  OpPlacement result = site.keep_inputs(dropped ? Placement::sharded(x.dim - 1) : x);
  result.inputs[0] = x;
  for (size_t i = 1; i < site.num_inputs(); ++i) result.inputs[i] = {};
  return result;
}

// OneHot (indices, depth, values): the output has the indices' dimensions around the new one.
OpPlacement place_one_hot(const Site& site) {
  const Placement& indices = site.in(0);
  if (!indices.is_sharded()) return site.replicated();
  const int axis = normalize_axis(attr_int(site.op.attributes, "axis", -1), site.output_rank(0));
  return site.first(indices,
                    Placement::sharded(indices.dim < axis ? indices.dim : indices.dim + 1));
}

// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (scores [N, C, ...], labels [N, ...],
// weights) and their gradients (dLoss, scores, labels, weights): rows along a dimension other
// than the classes' are independent; summed, they give a partial sum. A mean divides by the
// whole count, so it reads its inputs whole.
OpPlacement place_class_loss(const Site& site, bool gradient) {
  const size_t scores = gradient ? 1 : 0;
  const std::string reduction = attr_string(site.op.attributes, "reduction", "mean");
  int dim = -1;  // in the scores' numbering
  if (site.in(scores).is_sharded()) dim = site.in(scores).dim;
  if (site.in(scores + 1).is_sharded()) {
    const int label = site.in(scores + 1).dim;
    dim = label < 1 ? label : label + 1;
  }
  // Over a group of one (a replica's own rows, ir::replica_placements) a mean is the whole's.
  const bool whole_mean = reduction == "mean" && site.group_size > 1;
  if (dim < 0 || dim == 1 || whole_mean) return site.replicated();
  const Placement rows = Placement::sharded(dim);
  const Placement label_rows = Placement::sharded(dim < 1 ? dim : dim - 1);
  OpPlacement result = site.replicated();
  result.inputs[scores] = rows;
  result.inputs[scores + 1] = label_rows;
  if (gradient) {
    if (reduction == "none") result.inputs[0] = label_rows;
    result.outputs[0] = rows;
    return result;
  }
  result.outputs[0] = reduction == "none"  ? label_rows
                      : reduction == "sum" ? Placement::partial()
                                           : Placement{};
  if (result.outputs.size() > 1) result.outputs[1] = rows;
  return result;
}

// GatherND and piper.GatherNDGrad (data or dY, indices): a batch dimension (before
// `batch_dims`) split in either splits both and the output; linear in the data (or dY).
// GatherElements and piper.GatherElementsGrad alike for a dimension other than `axis`. The
// vocabulary-parallel rewrite (directives/vocab_parallel.h) gathers each member's block so.
OpPlacement place_aligned_gather(const Site& site, bool nd) {
  const int rank = nd ? std::min(site.input_rank(0), site.input_rank(1)) : site.input_rank(0);
  const int axis = normalize_axis(attr_int(site.op.attributes, "axis", 0), rank);
  const int64_t batch_dims = attr_int(site.op.attributes, "batch_dims", 0);
  const auto aligned = [&](const Placement& p) {
    if (!p.is_sharded()) return false;
    if (nd) return p.dim < batch_dims;
    const int64_t extent = site.output_shape(0)[p.dim];
    return p.dim != axis && site.input_shape(0)[p.dim] == extent &&
           site.input_shape(1)[p.dim] == extent;
  };
  OpPlacement result = site.replicated();
  for (size_t i = 0; i < 2; ++i) {
    if (!aligned(site.in(i))) continue;
    const Placement split = site.in(i);
    result.inputs[0] = result.inputs[1] = split;
    result.outputs[0] = split;
    return result;
  }
  if (site.in(0).is_partial() && site.in(1).is_replicated())
    return site.first(site.in(0), site.in(0));
  return result;
}

// piper.FusedAttention (Q, Kt, V[, Mask]) and its gradient: independent over the leading
// (batch and head) dimensions; the gradient is linear in dY.
OpPlacement place_attention(const Site& site, bool gradient) {
  const size_t first = gradient ? 1 : 0;  // Q's position
  const int rank = site.input_rank(first);
  int sharded = -1;
  for (size_t i = 0; i < site.num_inputs() && sharded < 0; ++i) {
    if (site.has_input(i) && site.in(i).is_sharded() && site.input_rank(i) == rank &&
        site.in(i).dim < rank - 2) {
      sharded = site.in(i).dim;
    }
  }
  OpPlacement result = site.replicated();
  if (sharded >= 0) {
    for (size_t i = 0; i < site.num_inputs(); ++i) {
      if (!site.has_input(i)) continue;
      const int dim = sharded - (rank - site.input_rank(i));
      if (dim >= 0 && !site.broadcast(i, dim, site.input_shape(first)[sharded])) {
        result.inputs[i] = Placement::sharded(dim);
      }
    }
    for (size_t j = 0; j < site.op.outputs.size(); ++j) {
      if (site.op.outputs[j] >= 0) result.outputs[j] = Placement::sharded(sharded);
    }
  } else if (gradient && site.in(0).is_partial()) {
    result.inputs[0] = Placement::partial();
    for (Placement& out : result.outputs) out = Placement::partial();
  }
  return result;
}

// piper.BiasGelu (X[, Bias]): a bias over the last dimension splits with it.
OpPlacement place_bias_gelu(const Site& site) {
  const Placement& x = site.in(0);
  OpPlacement result = site.replicated();
  if (!x.is_sharded()) return result;
  result.inputs[0] = x;
  if (site.has_input(1) && x.dim == site.input_rank(0) - 1) {
    result.inputs[1] = Placement::sharded(0);
  }
  result.outputs[0] = x;
  return result;
}

// piper.BiasGeluGrad (dY, X[, Bias] -> dX[, dBias]): linear in dY; dBias sums over rows.
OpPlacement place_bias_gelu_grad(const Site& site) {
  const Placement& x = site.in(1);
  const Placement& dy = site.in(0);
  OpPlacement result = site.replicated();
  if (x.is_sharded()) {
    const bool last = x.dim == site.input_rank(1) - 1;
    result.inputs[0] = x;
    result.inputs[1] = x;
    if (site.has_input(2) && last) result.inputs[2] = Placement::sharded(0);
    result.outputs[0] = x;
    if (result.outputs.size() > 1) {
      result.outputs[1] = last ? Placement::sharded(0) : Placement::partial();
    }
  } else if (dy.is_partial()) {
    result.inputs[0] = dy;
    for (Placement& out : result.outputs) out = Placement::partial();
  }
  return result;
}

// Optimizers update a parameter in place from its gradient and state, all alike; the
// gradient norm (last input, a scalar) is whole.
OpPlacement place_update(const Site& site) {
  OpPlacement result = site.replicated();
  const Placement& parameter = site.in(0);
  for (size_t i = 0; i < site.num_inputs(); ++i) {
    if (site.has_input(i) && site.input_shape(i) == site.input_shape(0)) {
      result.inputs[i] = parameter;
    }
  }
  return result;
}

// Piper's collectives over the group: what they take and give.
OpPlacement place_collective(const Site& site) {
  // Over the data-parallel replicas (exact batch means): nothing to do with the group's.
  if (attr_string(site.op.attributes, "group", "") == "replicas")
    return site.keep_inputs(site.in(0));
  OpPlacement result = site.replicated();
  if (site.op.type == "piper.AllReduce") {
    result.inputs[0] = Placement::partial();
  } else if (site.op.type == "piper.AllGather") {
    result.inputs[0] = Placement::sharded(0);
  } else if (site.op.type == "piper.AllToAll") {
    // [G, n / G, ...] blocks along `dim`: member g's block of row g goes to member g, and the
    // rows that come back are the members' blocks of this member's row: the block of dim 1.
    result.inputs[0] = Placement::sharded(static_cast<int>(attr_int(site.op.attributes, "dim", 1)));
    result.outputs[0] = Placement::sharded(1);
  } else {  // piper.ReduceScatter
    result.inputs[0] = Placement::partial();
    result.outputs[0] = Placement::sharded(0);
  }
  return result;
}

// piper.Shard: a data-parallel flat slice keeps the tensor-parallel placement of what it
// slices; with attribute group "tensor" it cuts a whole tensor into the member's block.
OpPlacement place_shard(const Site& site) {
  if (attr_string(site.op.attributes, "group", "") == "tensor") {
    OpPlacement result = site.replicated();
    result.outputs[0] = Placement::sharded(0);
    return result;
  }
  return site.keep_inputs(site.in(0));
}

using Rule = std::function<OpPlacement(const Site&)>;

const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> table = [] {
    std::map<std::string, Rule> t;
    t["MatMul"] = place_matmul;
    t["piper.MatMul"] = place_matmul;
    t["Gemm"] = place_matmul;
    for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) {
      t[op] = place_reshape;
    }
    t["Transpose"] = place_transpose;
    t["Slice"] = place_slice;
    t["piper.SliceGrad"] = place_slice;  // dY, starts, ends, axes, steps: Slice's inputs
    t["Concat"] = place_concat_or_split;
    t["Split"] = place_concat_or_split;
    t["Expand"] = place_broadcast;
    t["piper.BroadcastTo"] = place_broadcast;
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}) {
      t[op] = place_reduce;
    }
    t["piper.SumTo"] = place_sum_to;
    t["Softmax"] = [](const Site& site) { return place_softmax(site, false); };
    t["LogSoftmax"] = [](const Site& site) { return place_softmax(site, false); };
    t["piper.SoftmaxGrad"] = [](const Site& site) { return place_softmax(site, true); };
    t["piper.LogSoftmaxGrad"] = [](const Site& site) { return place_softmax(site, true); };
    t["LayerNormalization"] = place_layer_norm;
    t["piper.LayerNormalizationGrad"] = place_layer_norm_grad;
    t["Gather"] = place_gather;
    t["piper.GatherGrad"] = place_gather_grad;
    t["GatherND"] = [](const Site& site) { return place_aligned_gather(site, true); };
    t["piper.GatherNDGrad"] = [](const Site& site) { return place_aligned_gather(site, true); };
    t["GatherElements"] = [](const Site& site) { return place_aligned_gather(site, false); };
    t["piper.GatherElementsGrad"] = [](const Site& site) {
      return place_aligned_gather(site, false);
    };
    t["piper.FusedAttention"] = [](const Site& site) { return place_attention(site, false); };
    t["piper.FusedAttentionGrad"] = [](const Site& site) { return place_attention(site, true); };
    t["piper.BiasGelu"] = place_bias_gelu;
    t["piper.BiasGeluGrad"] = place_bias_gelu_grad;
    t["piper.AdamW"] = place_update;
    t["piper.SGD"] = place_update;
    t["Einsum"] = place_einsum;
    t["TopK"] = place_along_axis;
    t["CumSum"] = place_along_axis;
    t["ArgMax"] = place_along_axis;
    t["ArgMin"] = place_along_axis;
    t["OneHot"] = place_one_hot;
    for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
      t[op] = [](const Site& site) { return place_class_loss(site, false); };
    }
    for (const char* op :
         {"piper.SoftmaxCrossEntropyLossGrad", "piper.NegativeLogLikelihoodLossGrad"}) {
      t[op] = [](const Site& site) { return place_class_loss(site, true); };
    }
    for (const char* op :
         {"piper.AllReduce", "piper.AllGather", "piper.ReduceScatter", "piper.AllToAll"}) {
      t[op] = place_collective;
    }
    t["piper.Shard"] = place_shard;
    return t;
  }();
  return table;
}

}  // namespace

OpPlacement place_op(const OpGraph& graph, const Op& op, const std::vector<Placement>& given,
                     const std::vector<Shape>& whole, int64_t group_size,
                     const std::vector<Placement>* preferred_outputs) {
  const Site site{graph, op, given, whole, group_size, preferred_outputs};
  if (op.outputs.empty() && !rules().count(op.type)) return site.replicated();
  const auto rule = rules().find(op.type);
  if (rule != rules().end()) return rule->second(site);
  if (op.type == "Cast") return place_elementwise(site, {});
  const auto elementwise = elementwise_ops().find(op.type);
  if (elementwise != elementwise_ops().end()) return place_elementwise(site, elementwise->second);
  return site.replicated();
}

std::optional<std::vector<int64_t>> constant_ints(const OpGraph& graph, TensorId id) {
  if (id < 0) return std::nullopt;
  const Tensor& tensor = graph.tensor(id);
  if (tensor.dtype != DType::kInt64 || tensor.data.empty() || !tensor.initializer.empty()) {
    return std::nullopt;
  }
  std::vector<int64_t> values(tensor.data.size() / sizeof(int64_t));
  std::memcpy(values.data(), tensor.data.data(), values.size() * sizeof(int64_t));
  return values;
}

const Placement& held_placement(const OpGraph& graph, TensorId tensor) {
  const Tensor& held = graph.tensor(tensor);
  return held.shard_of >= 0 ? graph.tensor(held.shard_of).placement : held.placement;
}

Shape whole_shape(const Shape& shape, const Placement& placement, int64_t group_size) {
  Shape whole = shape;
  if (placement.is_sharded()) whole.at(placement.dim) *= group_size;
  return whole;
}

}  // namespace piper::ir
