#include "planner/token_mean.h"

#include <cstring>
#include <numeric>
#include <optional>
#include <set>

#include "formats/error.h"
#include "formats/slice_range.h"

namespace piper::planner {
namespace {

bool is_class_loss(const ir::Op& op) {
  return op.type == "SoftmaxCrossEntropyLoss" || op.type == "NegativeLogLikelihoodLoss";
}

// Ops that keep every entry in place: a window of their output is one of their input.
bool keeps_places(const ir::OpGraph& graph, const ir::Op& op) {
  if (op.type == "Identity") return true;
  return op.type == "Cast" &&
         graph.tensor(op.inputs.at(0)).dtype == graph.tensor(op.outputs.at(0)).dtype;
}

// Ops that move entries without changing their values: the count of ignored entries is their
// input's.
bool keeps_entries(const ir::OpGraph& graph, const ir::Op& op) {
  static const std::set<std::string> kTypes = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                               "Transpose"};
  return kTypes.count(op.type) > 0 || keeps_places(graph, op);
}

// The int64 values of a planner constant, or nullopt.
std::optional<std::vector<int64_t>> constant_ints(const ir::OpGraph& graph, ir::TensorId id) {
  if (id < 0) return std::nullopt;
  const ir::Tensor& tensor = graph.tensor(id);
  if (tensor.role != ir::Role::kConstant || tensor.dtype != ir::DType::kInt64) return std::nullopt;
  std::vector<int64_t> values(tensor.data.size() / sizeof(int64_t));
  std::memcpy(values.data(), tensor.data.data(), values.size() * sizeof(int64_t));
  return values;
}

// The window a Slice with constant bounds takes of each sample of `input`, or nullopt when
// its bounds are computed or it slices the batch dimension.
std::optional<std::vector<ir::CountWindow>> slice_window(const ir::OpGraph& graph,
                                                         const ir::Op& slice) {
  const ir::Shape& shape = graph.tensor(slice.inputs.at(0)).shape;
  const auto optional_input = [&](size_t index) {
    return index < slice.inputs.size() ? slice.inputs[index] : -1;
  };
  const auto starts = constant_ints(graph, slice.inputs.at(1));
  const auto ends = constant_ints(graph, slice.inputs.at(2));
  auto axes = constant_ints(graph, optional_input(3));
  auto steps = constant_ints(graph, optional_input(4));
  if (!starts || !ends || ends->size() != starts->size()) return std::nullopt;
  if (optional_input(3) < 0) axes = std::vector<int64_t>(starts->size());
  if (optional_input(3) < 0) std::iota(axes->begin(), axes->end(), 0);
  if (optional_input(4) < 0) steps = std::vector<int64_t>(starts->size(), 1);
  if (!axes || !steps || axes->size() != starts->size() || steps->size() != starts->size()) {
    return std::nullopt;
  }
  const auto rank = static_cast<int64_t>(shape.size());
  std::vector<ir::CountWindow> window;
  for (size_t d = 1; d < shape.size(); ++d) window.push_back({0, 1, shape[d]});
  for (size_t k = 0; k < axes->size(); ++k) {
    const int64_t axis = (*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k];
    if (axis <= 0 || axis >= rank || (*steps)[k] == 0) return std::nullopt;
    const auto d = static_cast<size_t>(axis);
    const formats::SliceRange range =
        formats::slice_range((*starts)[k], (*ends)[k], (*steps)[k], shape[d]);
    window[d - 1] = {range.begin, (*steps)[k], range.count};
  }
  return window;
}

// What counts the labelled entries of `labels`: a batch input, through ops that keep its
// entries, and at most one Slice by constants of its sample dimensions (HF causal models shift
// their labels) that reads it in place; nullopt when the labels are computed in the graph.
std::optional<ir::LabelCount> label_source(const ir::OpGraph& graph, ir::TensorId labels) {
  ir::LabelCount count;
  for (ir::OpId producer = graph.producer(labels); producer >= 0;
       producer = graph.producer(labels)) {
    const ir::Op& op = graph.op(producer);
    const bool sliced = !count.window.empty();
    if (op.type == "Slice" && !sliced) {
      auto window = slice_window(graph, op);
      if (!window) return std::nullopt;
      count.window = std::move(*window);
    } else if (!(sliced ? keeps_places(graph, op) : keeps_entries(graph, op))) {
      return std::nullopt;  // below a Slice, its window must stay in place
    }
    labels = op.inputs.at(0);
  }
  const ir::Tensor& source = graph.tensor(labels);
  if (source.role != ir::Role::kInput || source.dtype != ir::DType::kInt64) return std::nullopt;
  count.labels = labels;
  return count;
}

ir::TensorId add_scalar(ir::OpGraph& graph, std::string name, ir::Role role) {
  ir::Tensor tensor;
  tensor.name = std::move(name);
  tensor.role = role;
  return graph.add_tensor(std::move(tensor));
}

ir::TensorId add_constant(ir::OpGraph& graph, std::string name, float value) {
  const ir::TensorId id = add_scalar(graph, std::move(name), ir::Role::kConstant);
  ir::Tensor& tensor = graph.tensor(id);
  tensor.data.resize(sizeof value);
  std::memcpy(tensor.data.data(), &value, sizeof value);
  return id;
}

void add_op(ir::OpGraph& graph, const std::string& type, std::string name,
            std::vector<ir::TensorId> inputs, ir::TensorId output) {
  ir::Op op;
  op.type = type;
  op.name = std::move(name);
  op.inputs = std::move(inputs);
  op.outputs = {output};
  graph.add_op(std::move(op));
}

// loss = Sum-reduced loss x parts / N; the new ops come after every forward op, so the op
// list stays in dataflow order (nothing reads the loss).
void rewrite(ir::OpGraph& graph, ir::OpId loss_op, ir::LabelCount labels, int64_t parts) {
  ir::Op& op = graph.op(loss_op);
  const std::string name = op.name;
  labels.ignore_index = ir::attr_int(op.attributes, "ignore_index", 0);
  op.attributes["reduction"] = std::string("sum");
  const ir::TensorId sum =
      add_scalar(graph, graph.tensor(graph.loss).name + "/sum", ir::Role::kActivation);
  graph.op(loss_op).outputs[0] = sum;
  const ir::TensorId count = add_scalar(graph, name + "/labelled_entries", ir::Role::kInput);
  graph.tensor(count).label_count = std::move(labels);
  const ir::TensorId scaled =
      add_scalar(graph, graph.tensor(graph.loss).name + "/scaled", ir::Role::kActivation);
  add_op(graph, "Mul", name + "/times_parts",
         {sum, add_constant(graph, name + "/parts", static_cast<float>(parts))}, scaled);
  add_op(graph, "Div", name + "/over_labelled_entries", {scaled, count}, graph.loss);
}

}  // namespace

void make_token_means_global(ir::OpGraph& graph, int64_t parts, const std::string& model_path,
                             const std::string& strategy_source) {
  if (parts == 1) return;
  const ir::OpId loss_op = graph.producer(graph.loss);
  if (loss_op < 0 || !is_class_loss(graph.op(loss_op))) return;
  const ir::Op& op = graph.op(loss_op);
  const std::string where = model_path + ": the loss node '" + op.name + "'";
  const std::string divided = strategy_source +
                              " divides the batch into microbatches or replicas, whose "
                              "losses Piper averages";
  const std::string reduction = ir::attr_string(op.attributes, "reduction", "mean");
  if (reduction == "sum") {
    throw Error(where + " sums over the batch (reduction \"sum\"), but " + divided +
                "; export the loss as a mean (reduction \"mean\", or the sum divided by the "
                "batch size)");
  }
  if (reduction != "mean") return;  // "none" is no scalar, so not the loss itself
  if (op.inputs.size() > 2 && op.inputs[2] >= 0) {
    throw Error(where +
                " weighs classes, so its mean divides by the sum of the labelled "
                "entries' weights, which differs between parts, but " +
                divided +
                "; Piper does not compute that sum ahead yet: drop the weights, or train "
                "without split and replicate");
  }
  if (!op.attributes.count("ignore_index")) return;  // every part has as many entries
  if (!graph.consumers(graph.loss).empty()) {
    throw Error(where + ": its output '" + graph.tensor(graph.loss).name +
                "' is the loss and is read by other nodes; Piper cannot rescale it");
  }
  std::optional<ir::LabelCount> labels = label_source(graph, op.inputs.at(1));
  if (!labels) {
    throw Error(where + " has an ignore_index, and " + divided +
                ", so it divides by the step's count of labelled entries; the labelled-token "
                "count must come from the labels, but its labels '" +
                graph.tensor(op.inputs.at(1)).name +
                "' are computed in the graph, not an int64 graph input (reshaped, or sliced "
                "by constants along other dimensions than the batch); feed the labels as an "
                "input");
  }
  rewrite(graph, loss_op, std::move(*labels), parts);
}

}  // namespace piper::planner
