#include "planner/ir/dynamic_dims.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "formats/error.h"

namespace piper::ir {
namespace {

// One dimension while inferring: a static size, or a run-time extent with its bound.
struct Dim {
  int64_t bound = 1;
  TensorId extent = -1;  // -1: static, of size `bound`
  int64_t scale = 1;

  bool dynamic() const { return extent >= 0; }
  bool same_extent(const Dim& other) const {
    return extent == other.extent && scale == other.scale;
  }
};
using Dims = std::vector<Dim>;
using Inputs = std::vector<const Dims*>;  // null for an omitted optional input

// What a rule sees: the op, its inputs' dimensions and its outputs' shapes as imported (static
// sizes, or kUnknownDim where ONNX left a dimension symbolic).
struct OpView {
  const OpGraph& graph;
  const Op& op;
  const Inputs& in;
  const std::vector<Shape>& out;

  [[noreturn]] void fail(const std::string& message) const {
    throw Error("node '" + op.name + "' (" + op.type + "): " + message);
  }
  const Dims& input(size_t i) const {
    if (i >= in.size() || in[i] == nullptr) fail("input " + std::to_string(i) + " is missing");
    return *in[i];
  }
  int64_t axis(int64_t rank, int64_t fallback = 0) const {
    const int64_t axis = attr_int(op.attributes, "axis", fallback);
    const int64_t normalized = axis < 0 ? axis + rank : axis;
    if (normalized < 0 || normalized >= rank) {
      fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    }
    return normalized;
  }
  // The int64 values of constant input i, or of attribute `name` when the input is absent.
  std::optional<std::vector<int64_t>> ints(size_t i, const std::string& name) const {
    if (i < op.inputs.size() && op.inputs[i] >= 0) {
      const Tensor& tensor = graph.tensor(op.inputs[i]);
      if (tensor.dtype != DType::kInt64 || tensor.data.empty()) return std::nullopt;
      std::vector<int64_t> values(tensor.data.size() / sizeof(int64_t));
      std::memcpy(values.data(), tensor.data.data(), values.size() * sizeof(int64_t));
      return values;
    }
    if (op.attributes.count(name)) return attr_ints(op.attributes, name);
    return std::vector<int64_t>{};
  }
};

using Rule = std::vector<Dims> (*)(const OpView&);

std::string dims_text(const Dims& dims, const OpGraph& graph) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += ", ";
    const Dim& dim = dims[i];
    text += dim.dynamic() ? "<=" + std::to_string(dim.bound) + " x " +
                                (dim.scale != 1 ? std::to_string(dim.scale) + "*" : "") +
                                graph.tensor(dim.extent).name
                          : std::to_string(dim.bound);
  }
  return text + "]";
}

Dims static_dims(const Shape& shape) {
  Dims dims;
  for (int64_t size : shape) dims.push_back({size, -1, 1});
  return dims;
}

Dims dims_of(const OpGraph& graph, TensorId id) {
  const Tensor& tensor = graph.tensor(id);
  Dims dims = static_dims(tensor.shape);
  for (const DynamicDim& dynamic : tensor.dynamic) {
    dims.at(static_cast<size_t>(dynamic.dim)).extent = dynamic.extent;
    dims.at(static_cast<size_t>(dynamic.dim)).scale = dynamic.scale;
  }
  return dims;
}

bool any_dynamic(const Dims& dims) {
  return std::any_of(dims.begin(), dims.end(), [](const Dim& dim) { return dim.dynamic(); });
}

// The static size of a run of static dimensions.
int64_t static_product(const Dims& dims, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t i = begin; i < end; ++i) product *= dims[i].bound;
  return product;
}

std::vector<Dims> same_for_all(const OpView& view, const Dims& dims) {
  return std::vector<Dims>(view.op.outputs.size(), dims);
}

// Numpy broadcasting of the present inputs: a run-time extent broadcasts only against itself
// or a static 1.
Dims broadcast(const OpView& view, const std::vector<const Dims*>& operands) {
  size_t rank = 0;
  for (const Dims* dims : operands) rank = std::max(rank, dims ? dims->size() : 0);
  Dims result(rank);
  for (size_t back = 1; back <= rank; ++back) {
    Dim out;
    for (const Dims* dims : operands) {
      if (!dims || dims->size() < back) continue;
      const Dim& dim = (*dims)[dims->size() - back];
      const bool clash =
          dim.dynamic()
              ? (out.dynamic() && !out.same_extent(dim)) || (!out.dynamic() && out.bound != 1)
              : dim.bound != 1 && (out.dynamic() || (out.bound != 1 && out.bound != dim.bound));
      if (clash) {
        view.fail("operands of shapes " + dims_text(*operands.front(), view.graph) + " and " +
                  dims_text(*dims, view.graph) +
                  " do not broadcast: a run-time extent broadcasts only against itself or 1");
      }
      if (dim.dynamic() || dim.bound != 1) out = dim;
    }
    result[rank - back] = out;
  }
  return result;
}

std::vector<Dims> elementwise(const OpView& view) {
  return same_for_all(view, broadcast(view, view.in));
}

std::vector<Dims> non_zero(const OpView& view) {
  const Dims& x = view.input(0);
  if (view.op.outputs.size() < 2 || view.op.outputs[1] < 0) {
    view.fail("the count output Piper adds on import is missing");
  }
  const int64_t elements = static_product(x, 0, x.size());
  return {{{static_cast<int64_t>(x.size()), -1, 1}, {elements, view.op.outputs[1], 1}}, {}};
}

// Reshape, Flatten, Squeeze and Unsqueeze keep the element order: a run-time extent stays
// between the same static products before and after it, rescaled by the elements after it.
std::vector<Dims> reshape(const OpView& view) {
  const Dims& x = view.input(0);
  const Shape& target = view.out.at(0);
  const auto dynamic =
      std::find_if(x.begin(), x.end(), [](const Dim& dim) { return dim.dynamic(); });
  if (dynamic == x.end()) {
    if (std::count(target.begin(), target.end(), kUnknownDim) > 0) {
      view.fail("the output shape stays unknown");
    }
    return {static_dims(target)};
  }
  if (std::count_if(dynamic + 1, x.end(), [](const Dim& dim) { return dim.dynamic(); }) > 0) {
    view.fail("reshaping " + dims_text(x, view.graph) +
              ", a tensor with two run-time extents, is not supported");
  }
  const size_t d = static_cast<size_t>(dynamic - x.begin());
  const int64_t before = static_product(x, 0, d);
  const int64_t after = static_product(x, d + 1, x.size());
  const int64_t count_bound = dynamic->bound / dynamic->scale;
  int64_t prefix = 1;
  for (size_t j = 0; j < target.size(); ++j) {
    if (prefix == before) {
      bool known = true;
      int64_t suffix = 1;
      for (size_t k = j + 1; k < target.size(); ++k) {
        known = known && target[k] != kUnknownDim;
        suffix *= target[k];
      }
      const int64_t scaled = dynamic->scale * after;
      if (known && suffix > 0 && scaled % suffix == 0 &&
          (target[j] == kUnknownDim || target[j] == scaled / suffix * count_bound)) {
        Dims out = static_dims(target);
        out[j] = {scaled / suffix * count_bound, dynamic->extent, scaled / suffix};
        return {out};
      }
    }
    if (target[j] == kUnknownDim) break;
    prefix *= target[j];
  }
  view.fail("reshaping " + dims_text(x, view.graph) + " to " + to_string(target) +
            " would split or merge a run-time extent with static dimensions in a way Piper "
            "cannot express");
}

std::vector<Dims> transpose(const OpView& view) {
  const Dims& x = view.input(0);
  std::vector<int64_t> perm = attr_ints(view.op.attributes, "perm");
  if (perm.empty()) {
    for (size_t i = x.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  if (perm.size() != x.size()) view.fail("perm does not match the input's rank");
  Dims out;
  for (int64_t p : perm) out.push_back(x.at(static_cast<size_t>(p)));
  return {out};
}

// MatMul, Gemm and piper.MatMul (with transA and transB): batch dimensions broadcast, the
// contracted extents must agree, rows come from A and columns from B.
std::vector<Dims> matmul(const OpView& view) {
  Dims a = view.input(0), b = view.input(1);
  if (a.size() < 2 || b.size() < 2) view.fail("a product of vectors with run-time extents");
  const auto& attrs = view.op.attributes;
  if (attr_int(attrs, "transA", 0)) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (attr_int(attrs, "transB", 0)) std::swap(b[b.size() - 1], b[b.size() - 2]);
  const Dim& ka = a.back();
  const Dim& kb = b[b.size() - 2];
  if ((ka.dynamic() || kb.dynamic()) && !ka.same_extent(kb)) {
    view.fail("contracts " + dims_text(a, view.graph) + " with " + dims_text(b, view.graph) +
              ", whose contracted dimensions differ");
  }
  const Dims a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  Dims out = broadcast(view, {&a_batch, &b_batch});
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  return same_for_all(view, out);
}

std::vector<Dims> gather(const OpView& view) {
  const Dims& data = view.input(0);
  const Dims& indices = view.input(1);
  const auto axis = static_cast<size_t>(view.axis(static_cast<int64_t>(data.size())));
  Dims out(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.end());
  return {out};
}

std::vector<Dims> like_indices(const OpView& view) { return {view.input(1)}; }

// A scatter writes into a copy of its data; its updates must have its indices' extents.
std::vector<Dims> scatter(const OpView& view) {
  const Dims& indices = view.input(1);
  const Dims& updates = view.input(2);
  const bool agree = indices.size() == updates.size() || view.op.type == "ScatterND";
  for (size_t i = 0; agree && i < std::min(indices.size(), updates.size()); ++i) {
    if ((indices[i].dynamic() || updates[i].dynamic()) && !indices[i].same_extent(updates[i])) {
      view.fail("updates " + dims_text(updates, view.graph) + " and indices " +
                dims_text(indices, view.graph) + " must have the same run-time extents");
    }
  }
  return {view.input(0)};
}

// Outputs sized by the planner (a gradient's data shape): static, as the output says.
std::vector<Dims> planned_output(const OpView& view) {
  std::vector<Dims> outs;
  for (const Shape& shape : view.out) {
    if (std::count(shape.begin(), shape.end(), kUnknownDim) > 0) {
      view.fail("the output shape stays unknown");
    }
    outs.push_back(static_dims(shape));
  }
  return outs;
}

// Ops that keep some dimensions and resize others (Slice, Split, Pad): a kept dimension keeps
// its extent; a resized one must be static.
std::vector<Dims> resized(const OpView& view) {
  const Dims& x = view.input(0);
  std::vector<Dims> outs;
  for (const Shape& shape : view.out) {
    if (shape.size() != x.size()) view.fail("changes the rank of a tensor with a run-time extent");
    Dims out;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].dynamic() && (shape[i] == kUnknownDim || shape[i] == x[i].bound)) {
        out.push_back(x[i]);
      } else if (x[i].dynamic()) {
        view.fail("would resize dimension " + std::to_string(i) + " of " +
                  dims_text(x, view.graph) + ", whose extent is known only at run time");
      } else if (shape[i] == kUnknownDim) {
        view.fail("the output shape stays unknown");
      } else {
        out.push_back({shape[i], -1, 1});
      }
    }
    outs.push_back(out);
  }
  return outs;
}

std::vector<Dims> concat(const OpView& view) {
  const Dims& first = view.input(0);
  const auto axis = static_cast<size_t>(view.axis(static_cast<int64_t>(first.size())));
  Dims out = first;
  out[axis].bound = 0;
  for (const Dims* dims : view.in) {
    if (!dims || dims->size() != first.size()) view.fail("inputs of different ranks");
    if ((*dims)[axis].dynamic()) {
      view.fail("concatenates along a dimension whose extent is known only at run time");
    }
    out[axis].bound += (*dims)[axis].bound;
    for (size_t i = 0; i < first.size(); ++i) {
      if (i != axis && (first[i].dynamic() || (*dims)[i].dynamic()) &&
          !first[i].same_extent((*dims)[i])) {
        view.fail("inputs " + dims_text(first, view.graph) + " and " +
                  dims_text(*dims, view.graph) + " differ in a run-time extent");
      }
    }
  }
  return {out};
}

// Expand and piper.BroadcastTo: the input broadcast to the output's shape, where a run-time
// extent of the input stays one.
std::vector<Dims> expand(const OpView& view) {
  const Dims& x = view.input(0);
  const Shape& target = view.out.at(0);
  const size_t rank = std::max(x.size(), target.size());
  Dims out(rank);
  for (size_t back = 1; back <= rank; ++back) {
    const int64_t size = back <= target.size() ? target[target.size() - back] : 1;
    const Dim* dim = back <= x.size() ? &x[x.size() - back] : nullptr;
    if (dim && (dim->dynamic() || dim->bound != 1)) {
      out[rank - back] = *dim;
    } else if (size == kUnknownDim) {
      view.fail("broadcasts to a run-time extent it does not hold; Piper cannot size it");
    } else {
      out[rank - back] = {size, -1, 1};
    }
  }
  return {out};
}

// piper.SumTo: the gradient summed down to an operand's shape: a dimension the operand
// broadcast (static 1) is summed away, the others keep their extents.
std::vector<Dims> sum_to(const OpView& view) {
  const Dims& x = view.input(0);
  const Shape& target = view.out.at(0);
  if (target.size() > x.size()) view.fail("sums to a shape of higher rank");
  Dims out;
  for (size_t j = 0; j < target.size(); ++j) {
    const Dim& dim = x[x.size() - target.size() + j];
    out.push_back(target[j] == 1 && dim.bound != 1 ? Dim{1, -1, 1} : dim);
  }
  return {out};
}

std::vector<Dims> reduce(const OpView& view) {
  const Dims& x = view.input(0);
  const auto axes = view.ints(1, "axes");
  if (!axes) view.fail("its axes are not a planning-time constant");
  const bool keep = attr_int(view.op.attributes, "keepdims", 1) != 0;
  const bool noop = attr_int(view.op.attributes, "noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(x.size(), axes->empty() && !noop);
  for (int64_t axis : *axes) {
    const int64_t rank = static_cast<int64_t>(x.size());
    const int64_t normalized = axis < 0 ? axis + rank : axis;
    if (normalized < 0 || normalized >= rank) view.fail("axis out of range");
    reduced[static_cast<size_t>(normalized)] = true;
  }
  Dims out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!reduced[i]) {
      out.push_back(x[i]);
    } else if (keep) {
      out.push_back({1, -1, 1});
    }
  }
  return {out};
}

// piper.AllToAllV (directives/expert_modules.h): n pieces of rows, their n counts and, for an
// exchange aligned with an earlier one, the total that one received. The rows received are the
// pieces' bounds together, their extent that total or the one this exchange writes (output 1).
std::vector<Dims> rows_exchanged(const OpView& view) {
  const bool aligned = view.op.outputs.size() == 1;
  const size_t n = (view.op.inputs.size() - (aligned ? 1 : 0)) / 2;
  Dims rows = view.input(0);
  if (rows.empty()) view.fail("exchanges a scalar");
  int64_t bound = 0;
  for (size_t j = 0; j < n; ++j) {
    const Dims& piece = view.input(j);
    if (piece.size() != rows.size()) view.fail("exchanges pieces of different ranks");
    bound += piece[0].bound;
  }
  rows[0] = {bound, aligned ? view.op.inputs.back() : view.op.outputs.at(1), 1};
  if (aligned) return {rows};
  return {rows, static_dims(view.out.at(1)), static_dims(view.out.at(2))};
}

// piper.AllToAllVReturn: the rows of input 0 back to the n members they came from; output j
// gets an n-th of their bound and as many rows as count input 2 + j says.
std::vector<Dims> rows_returned(const OpView& view) {
  const Dims& rows = view.input(0);
  if (rows.empty()) view.fail("returns a scalar");
  const size_t n = view.op.outputs.size();
  std::vector<Dims> pieces;
  for (size_t j = 0; j < n; ++j) {
    Dims piece = rows;
    piece[0] = {rows[0].bound / static_cast<int64_t>(n), view.op.inputs.at(2 + j), 1};
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> kRules = [] {
    std::map<std::string, Rule> table = {
        {"NonZero", non_zero},
        {"Transpose", transpose},
        {"MatMul", matmul},
        {"Gemm", matmul},
        {"piper.MatMul", matmul},
        {"Gather", gather},
        {"GatherElements", like_indices},
        {"ScatterElements", scatter},
        {"ScatterND", scatter},
        {"Slice", resized},
        {"Split", resized},
        {"Pad", resized},
        {"Concat", concat},
        {"Expand", expand},
        {"piper.BroadcastTo", expand},
        {"piper.SumTo", sum_to},
        {"Shape", planned_output},
        {"Size", planned_output},
        {"ConstantOfShape", planned_output},
        {"piper.GatherGrad", planned_output},
        {"piper.GatherElementsGrad", planned_output},
        {"piper.GatherNDGrad", planned_output},
        {"piper.AllToAllV", rows_exchanged},
        {"piper.AllToAllVReturn", rows_returned},
    };
    for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) table[op] = reshape;
    for (const char* op :
         {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}) {
      table[op] = reduce;
    }
    return table;
  }();
  return kRules;
}

class Inference {
 public:
  explicit Inference(OpGraph& graph) : graph_(graph) {}

  void run() {
    for (TensorId id = 0; id < graph_.num_tensors(); ++id) graph_.tensor(id).dynamic.clear();
    for (OpId id : topological_order()) infer(graph_.op(id));
    for (const Tensor& tensor : graph_.tensors()) {
      if (std::count(tensor.shape.begin(), tensor.shape.end(), kUnknownDim) > 0) {
        throw Error("'" + tensor.name +
                    "' has a dimension that stays unknown with the batch fixed: no op sizes it");
      }
    }
  }

 private:
  std::vector<OpId> topological_order() const {
    std::vector<int> waiting(graph_.num_ops(), 0);
    std::vector<std::vector<OpId>> readers(graph_.num_tensors());
    for (OpId id = 0; id < graph_.num_ops(); ++id) {
      for (TensorId in : graph_.op(id).inputs) {
        if (in >= 0 && graph_.producer(in) >= 0) {
          ++waiting[id];
          readers[in].push_back(id);
        }
      }
    }
    std::vector<OpId> order;
    for (OpId id = 0; id < graph_.num_ops(); ++id) {
      if (waiting[id] == 0) order.push_back(id);
    }
    for (size_t next = 0; next < order.size(); ++next) {
      for (TensorId out : graph_.op(order[next]).outputs) {
        if (out < 0) continue;
        for (OpId reader : readers[out]) {
          if (--waiting[reader] == 0) order.push_back(reader);
        }
      }
    }
    return order;
  }

  void infer(const Op& op) {
    std::vector<Dims> storage;
    storage.reserve(op.inputs.size());
    Inputs in;
    bool dynamic = false;
    for (TensorId id : op.inputs) {
      if (id < 0) {
        in.push_back(nullptr);
        continue;
      }
      storage.push_back(dims_of(graph_, id));
      dynamic = dynamic || any_dynamic(storage.back());
      in.push_back(&storage.back());
    }
    std::vector<Shape> out;
    bool unknown = false;
    for (TensorId id : op.outputs) {
      out.push_back(id >= 0 ? graph_.tensor(id).shape : Shape{});
      unknown = unknown || std::count(out.back().begin(), out.back().end(), kUnknownDim) > 0;
    }
    if (!dynamic && !unknown && op.type != "NonZero") return;
    const auto rule = rules().find(op.type);
    const OpView view{graph_, op, in, out};
    if (!dynamic && rule == rules().end()) {
      view.fail(
          "an output has a dimension that stays unknown with the batch fixed; only the "
          "batch and the run-time extents NonZero computes may be dynamic");
    }
    const std::vector<Dims> result = rule != rules().end() ? rule->second(view) : elementwise(view);
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      if (op.outputs[i] >= 0) assign(view, op.outputs[i], result.at(i));
    }
  }

  // Checks the inferred dimensions against the output's imported shape and records them.
  void assign(const OpView& view, TensorId id, const Dims& dims) {
    Tensor& tensor = graph_.tensor(id);
    bool fits = dims.size() == tensor.shape.size();
    for (size_t i = 0; fits && i < dims.size(); ++i) {
      fits = tensor.shape[i] == kUnknownDim || tensor.shape[i] == dims[i].bound;
    }
    if (!fits) {
      view.fail(
          "reads a tensor whose extent is known only at run time, and Piper has no rule "
          "for this op that gives its output '" +
          tensor.name + "' of shape " + to_string(tensor.shape) + " (inferred " +
          dims_text(dims, graph_) + ")");
    }
    for (size_t i = 0; i < dims.size(); ++i) {
      tensor.shape[i] = dims[i].bound;
      if (dims[i].dynamic()) {
        tensor.dynamic.push_back({static_cast<int>(i), dims[i].extent, dims[i].scale});
      }
    }
  }

  OpGraph& graph_;
};

}  // namespace

void infer_dynamic_dims(OpGraph& graph) { Inference(graph).run(); }

bool has_dynamic_dims(const OpGraph& graph) {
  return std::any_of(graph.tensors().begin(), graph.tensors().end(),
                     [](const Tensor& tensor) { return !tensor.dynamic.empty(); });
}

std::string describe_shape(const OpGraph& graph, TensorId tensor) {
  return dims_text(dims_of(graph, tensor), graph);
}

}  // namespace piper::ir
