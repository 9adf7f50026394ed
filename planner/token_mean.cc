#include "planner/token_mean.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>

#include "formats/error.h"
#include "formats/slice_range.h"
#include "planner/ir/scalar_constant.h"

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
  return graph.add_tensor(ir::scalar_constant(std::move(name), value));
}

void insert_op(ir::OpGraph& graph, ir::OpId position, const std::string& type, std::string name,
               std::vector<ir::TensorId> inputs, ir::TensorId output) {
  ir::Op op;
  op.type = type;
  op.name = std::move(name);
  op.inputs = std::move(inputs);
  op.outputs = {output};
  graph.insert_op(position, std::move(op));
}

// The class loss's output = its Sum-reduced loss x parts / N, computed right after it, so the
// op list stays in dataflow order.
void rewrite(ir::OpGraph& graph, ir::OpId loss_op, ir::LabelCount labels, int64_t parts) {
  ir::Op& op = graph.op(loss_op);
  const std::string name = op.name;
  const ir::TensorId mean = op.outputs[0];
  labels.ignore_index = ir::attr_int(op.attributes, "ignore_index", 0);
  op.attributes["reduction"] = std::string("sum");
  const ir::TensorId sum =
      add_scalar(graph, graph.tensor(mean).name + "/sum", ir::Role::kActivation);
  op.outputs[0] = sum;
  const ir::TensorId count = add_scalar(graph, name + "/labelled_entries", ir::Role::kInput);
  graph.tensor(count).label_count = std::move(labels);
  const ir::TensorId scaled =
      add_scalar(graph, graph.tensor(mean).name + "/scaled", ir::Role::kActivation);
  insert_op(graph, loss_op + 1, "Mul", name + "/times_parts",
            {sum, add_constant(graph, name + "/parts", static_cast<float>(parts))}, scaled);
  insert_op(graph, loss_op + 2, "Div", name + "/over_labelled_entries", {scaled, count}, mean);
}

// How a class loss's output reaches the step's loss: not at all, only through sums and
// products with what no part computes (constants, parameters), so that the mean of the parts'
// losses is as linear in each part's class loss as one process's loss is, or otherwise.
enum class Reach { kNone, kLinear, kOther };

bool same_on_every_part(const ir::OpGraph& graph, ir::TensorId tensor) {
  return graph.producer(tensor) < 0 &&
         std::find(graph.inputs.begin(), graph.inputs.end(), tensor) == graph.inputs.end();
}

bool linear_in(const ir::OpGraph& graph, const ir::Op& op, ir::TensorId input) {
  static const std::set<std::string> kSums = {"Add", "Sub", "Sum", "Neg", "Identity"};
  if (kSums.count(op.type) > 0) return true;
  if (op.type == "Cast") return is_float(graph.tensor(op.outputs.at(0)).dtype);
  if (op.type == "Mul") {
    const ir::TensorId other = op.inputs.at(op.inputs.at(0) == input ? 1 : 0);
    return other != input && same_on_every_part(graph, other);
  }
  return op.type == "Div" && op.inputs.at(0) == input && op.inputs.at(1) != input &&
         same_on_every_part(graph, op.inputs.at(1));
}

Reach reach_of(const ir::OpGraph& graph, ir::TensorId tensor) {
  if (tensor == graph.loss) return Reach::kLinear;
  Reach reach = Reach::kNone;
  for (ir::OpId reader : graph.consumers(tensor)) {
    const ir::Op& op = graph.op(reader);
    for (ir::TensorId out : op.outputs) {
      const Reach next = out < 0 ? Reach::kNone : reach_of(graph, out);
      if (next == Reach::kNone) continue;
      if (next == Reach::kOther || !linear_in(graph, op, tensor)) return Reach::kOther;
      reach = Reach::kLinear;
    }
  }
  return reach;
}

// One class loss: rewritten when it is a token mean (reduction mean, an ignore_index) the loss
// reads linearly; refused where its parts' mean would be another objective.
void make_global(ir::OpGraph& graph, ir::OpId loss_op, int64_t parts, const std::string& model_path,
                 const std::string& strategy_source) {
  const ir::Op& op = graph.op(loss_op);
  const ir::TensorId output = op.outputs.at(0);
  const Reach reach = reach_of(graph, output);
  if (reach == Reach::kNone) return;
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
  if (output == graph.loss && !graph.consumers(graph.loss).empty()) {
    throw Error(where + ": its output '" + graph.tensor(graph.loss).name +
                "' is the loss and is read by other nodes; Piper cannot rescale it");
  }
  if (reach == Reach::kOther) {
    throw Error(where + " has an ignore_index, and " + divided +
                ", so each part's mean divides by the step's count of labelled entries; but "
                "the loss reads '" +
                graph.tensor(output).name +
                "' other than through sums and products with constants or parameters, so the "
                "parts' mean "
                "would be another objective: train without split and replicate, or add the "
                "mean to the loss as it is");
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

}  // namespace

void make_token_means_global(ir::OpGraph& graph, int64_t parts, const std::string& model_path,
                             const std::string& strategy_source) {
  if (parts == 1) return;
  // From the last: a rewrite inserts ops after its class loss, moving those after it.
  for (ir::OpId id = graph.num_ops() - 1; id >= 0; --id) {
    if (is_class_loss(graph.op(id))) make_global(graph, id, parts, model_path, strategy_source);
  }
}

}  // namespace piper::planner
