#include "planner/sim/cost_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/einsum.h"
#include "formats/error.h"

namespace piper::planner::sim {
namespace {

double elements(const ir::OpGraph& graph, ir::TensorId tensor) {
  return tensor < 0 ? 0.0 : static_cast<double>(ir::num_elements(graph.tensor(tensor).shape));
}

double bytes(const ir::OpGraph& graph, ir::TensorId tensor) {
  return tensor < 0 ? 0.0 : elements(graph, tensor) * ir::dtype_size(graph.tensor(tensor).dtype);
}

const ir::Shape& shape(const ir::OpGraph& graph, const ir::Op& op, size_t input) {
  static const ir::Shape kNone;
  if (input >= op.inputs.size() || op.inputs[input] < 0) return kNone;
  return graph.tensor(op.inputs[input]).shape;
}

// A product as a products grid indexes it (formats/measured_costs.h): `batch` products
// [m, k] x [k, n] read in `layout`.
struct ProductShape {
  double batch = 1, m = 0, n = 0, k = 0;
  std::string layout;
};

// MatMul, Gemm and piper.MatMul; nullopt for other ops (an Einsum is priced by its FLOPs).
std::optional<ProductShape> product_shape(const ir::OpGraph& graph, const ir::Op& op) {
  if (op.type != "MatMul" && op.type != "Gemm" && op.type != "piper.MatMul") return std::nullopt;
  const ir::Shape& a = shape(graph, op, 0);
  const ir::Shape& b = shape(graph, op, 1);
  if (a.empty() || op.outputs.empty()) return std::nullopt;
  const auto transposed = [&](const char* name, const ir::Shape& operand) {
    return op.type != "MatMul" && ir::attr_int(op.attributes, name, 0) != 0 && operand.size() >= 2;
  };
  const bool trans_a = transposed("transA", a);
  const bool trans_b = transposed("transB", b);
  const auto at = [](const ir::Shape& dims, size_t from_end) {
    return static_cast<double>(dims[dims.size() - from_end]);
  };
  ProductShape product;
  product.layout = formats::product_layout(trans_a, trans_b);
  // As numpy: a 1-D A is one row, a 1-D B one column.
  product.m = a.size() < 2 ? 1 : at(a, trans_a ? 1 : 2);
  product.k = at(a, trans_a ? 2 : 1);
  product.n = b.size() < 2 ? 1 : at(b, trans_b ? 2 : 1);
  const double each = product.m * product.n;
  product.batch = each > 0 ? elements(graph, op.outputs[0]) / each : 0;
  // Batches that share one B run as one taller product (the CPU's BatchedGemm folds them, and
  // a GPU's library runs them as one launch).
  if (b.size() <= 2 && !trans_a) {
    product.m *= product.batch;
    product.batch = 1;
  }
  return product;
}

// One multiply-add per point of the space all labels span.
double einsum_flops(const ir::OpGraph& graph, const ir::Op& op) {
  const auto found = op.attributes.find("equation");
  if (found == op.attributes.end()) return 0;
  const auto* equation = std::get_if<std::string>(&found->second);
  if (equation == nullptr) return 0;
  std::vector<size_t> ranks;
  for (size_t i = 0; i < op.inputs.size(); ++i) ranks.push_back(shape(graph, op, i).size());
  formats::EinsumEquation parsed;
  try {
    parsed = formats::parse_einsum(*equation, ranks);
  } catch (const Error&) {
    return 0;  // the importer reports bad equations; the estimate need not
  }
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < parsed.inputs.size(); ++i) {
    const ir::Shape& dims = shape(graph, op, i);
    for (size_t d = 0; d < parsed.inputs[i].size() && d < dims.size(); ++d) {
      int64_t& size = sizes[parsed.inputs[i][d]];
      size = std::max(size, dims[d]);
    }
  }
  double points = 1;
  for (const auto& [label, size] : sizes) points *= static_cast<double>(size);
  return (op.inputs.size() > 1 ? 2.0 : 1.0) * points;
}

// Q [..., T, D], Kt [..., D, Tk], V [..., Tk, Dv] at inputs `q`, q+1, q+2.
// Forward: S = Q Kt, softmax, Y = P V. Backward: S again, dV, dP, dQ, dKt.
double attention_flops(const ir::OpGraph& graph, const ir::Op& op, size_t q, bool gradient) {
  const ir::Shape& query = shape(graph, op, q);
  const ir::Shape& keys = shape(graph, op, q + 1);
  const ir::Shape& values = shape(graph, op, q + 2);
  if (query.size() < 2 || keys.size() < 2 || values.size() < 2) return 0;
  const double t = static_cast<double>(query[query.size() - 2]);
  const double d = static_cast<double>(query.back());
  const double tk = static_cast<double>(keys.back());
  const double dv = static_cast<double>(values.back());
  const double batch = t * d > 0 ? static_cast<double>(ir::num_elements(query)) / (t * d) : 0;
  return formats::attention_flops(batch, t, d, tk, dv, gradient);
}

// FLOPs per element of the op's largest tensor, for ops that are not
// contractions. Unlisted ops count 1 (an add, a compare).
double flops_per_element(const std::string& type) {
  static const std::set<std::string> kFree = {"Reshape",
                                              "Squeeze",
                                              "Unsqueeze",
                                              "Flatten",
                                              "Identity",
                                              "Shape",
                                              "Constant",
                                              "ConstantOfShape",
                                              "Expand",
                                              "Transpose",
                                              "Concat",
                                              "Split",
                                              "Slice",
                                              "Gather",
                                              "GatherElements",
                                              "GatherND",
                                              "ScatterND",
                                              "ScatterElements",
                                              "Tile",
                                              "Cast",
                                              "Range",
                                              "OneHot",
                                              "Trilu",
                                              "piper.Shard",
                                              "piper.BroadcastTo",
                                              "piper.SliceGrad",
                                              "piper.GatherGrad",
                                              "piper.GatherElementsGrad",
                                              "piper.GatherNDGrad"};
  static const std::map<std::string, double> kCosts = {
      {"Tanh", 8},
      {"Erf", 8},
      {"Exp", 8},
      {"Log", 8},
      {"Sigmoid", 8},
      {"Softplus", 8},
      {"Elu", 8},
      {"Selu", 8},
      {"Celu", 8},
      {"Sin", 8},
      {"Cos", 8},
      {"Tan", 8},
      {"Sinh", 8},
      {"Cosh", 8},
      {"Asin", 8},
      {"Acos", 8},
      {"Atan", 8},
      {"Asinh", 8},
      {"Acosh", 8},
      {"Atanh", 8},
      {"Sqrt", 4},
      {"Pow", 8},
      {"Softmax", 5},
      {"ReduceLogSumExp", 8},
      {"LogSoftmax", 5},
      {"Dropout", 4},
      {"LayerNormalization", 8},
      {"SoftmaxCrossEntropyLoss", 6},
      {"piper.BiasGelu", 10},
      {"piper.BiasGeluGrad", 14},
      {"piper.TanhGrad", 3},
      {"piper.SigmoidGrad", 3},
      {"piper.SoftplusGrad", 8},
      {"piper.EluGrad", 8},
      {"piper.SeluGrad", 8},
      {"piper.CeluGrad", 8},
      {"piper.SinGrad", 8},
      {"piper.CosGrad", 8},
      {"piper.TanGrad", 3},
      {"piper.SinhGrad", 8},
      {"piper.CoshGrad", 8},
      {"piper.AsinGrad", 4},
      {"piper.AcosGrad", 4},
      {"piper.AtanGrad", 3},
      {"piper.AsinhGrad", 4},
      {"piper.AcoshGrad", 4},
      {"piper.AtanhGrad", 3},
      {"piper.ErfGrad", 10},
      {"piper.SoftmaxGrad", 4},
      {"piper.LogSoftmaxGrad", 10},
      {"piper.LayerNormalizationGrad", 12},
      {"piper.SoftmaxCrossEntropyLossGrad", 8},
      {"piper.PowBaseGrad", 10},
      {"piper.PowExponentGrad", 10},
      {"piper.SGD", 4},
      {"piper.AdamW", 16},
      {"piper.SumSquares", 2},
  };
  if (kFree.count(type)) return 0;
  const auto found = kCosts.find(type);
  return found == kCosts.end() ? 1.0 : found->second;
}

// The measured kernel whose curve prices `op` (formats/measured_costs.h): its own op type's, else
// its class's (contractions as piper.MatMul, views as Reshape, the rest as the element-wise Add);
// null when the profile has neither, and the rates price it.
const formats::MeasuredKernel* measured_kernel(const ir::Op& op, const std::string& dtype,
                                               const formats::MeasuredCosts& measured) {
  if (measured.kernels.empty()) return nullptr;
  if (const formats::MeasuredKernel* own = measured.kernel(op.type, dtype)) return own;
  static const std::set<std::string> kContractions = {"MatMul", "Gemm", "Einsum"};
  static const std::set<std::string> kViews = {"Flatten", "Squeeze", "Unsqueeze", "Identity"};
  if (kContractions.count(op.type)) return measured.kernel("piper.MatMul", dtype);
  if (kViews.count(op.type)) return measured.kernel("Reshape", dtype);
  return measured.kernel("Add", dtype);
}

formats::CollectiveKind measured_kind(ir::TaskKind kind) {
  switch (kind) {
    case ir::TaskKind::kAllReduce:
      return formats::CollectiveKind::kAllReduce;
    case ir::TaskKind::kReduceScatter:
      return formats::CollectiveKind::kReduceScatter;
    case ir::TaskKind::kAllGather:
      return formats::CollectiveKind::kAllGather;
    case ir::TaskKind::kAllToAll:
      return formats::CollectiveKind::kAllToAll;
    case ir::TaskKind::kBroadcast:
      return formats::CollectiveKind::kBroadcast;
    default:  // send, recv
      return formats::CollectiveKind::kTransfer;
  }
}

std::optional<ir::TaskKind> reshard_kind(const std::string& op_type) {
  if (op_type == "piper.AllReduce") return ir::TaskKind::kAllReduce;
  if (op_type == "piper.ReduceScatter") return ir::TaskKind::kReduceScatter;
  if (op_type == "piper.AllGather") return ir::TaskKind::kAllGather;
  if (op_type == "piper.AllToAll" || op_type == "piper.AllToAllV" ||
      op_type == "piper.AllToAllVReturn") {
    return ir::TaskKind::kAllToAll;
  }
  return std::nullopt;
}

// The ranks that run DAG device `device`: its tensor-parallel group, or itself.
std::vector<int> ranks_of(const ir::TaskGraph& graph, int device) {
  if (graph.shard_groups.empty()) return {device};
  return graph.shard_groups.at(static_cast<size_t>(device));
}

// For each member m of the devices' tensor-parallel groups, the ranks that run `devices`
// as member m (the devices themselves without tensor parallelism).
std::vector<std::vector<int>> member_ranks(const ir::TaskGraph& graph,
                                           const std::vector<int>& devices) {
  std::vector<std::vector<int>> members;
  for (int device : devices) {
    const std::vector<int> group = ranks_of(graph, device);
    members.resize(std::max(members.size(), group.size()));
    for (size_t m = 0; m < group.size(); ++m) members[m].push_back(group[m]);
  }
  return members;
}

// A reshard on DAG device `device` runs over the device's tensor-parallel group, or under
// expert parallelism over the task's replicas (as lowering groups them; each member of
// their tensor-parallel groups over its own ranks, the slowest counting).
double reshard_seconds(const ir::TaskGraph& graph, const ir::Task& task, int device,
                       const ir::Op& op, ir::TaskKind kind, double bytes,
                       const DeviceRates& rates) {
  if (!ir::runs_over_replicas(op)) {
    return collective_seconds(kind, ranks_of(graph, device), bytes, rates);
  }
  double slowest = 0;
  for (const std::vector<int>& ranks : member_ranks(graph, task.devices)) {
    slowest = std::max(slowest, collective_seconds(kind, ranks, bytes, rates));
  }
  return slowest;
}

// Kernels on the device's rates; reshards as collectives over the device's tensor-parallel
// group, the slowest replica's (its group may span nodes where another's does not).
double compute_seconds(const ir::TaskGraph& graph, const ir::Task& task, const DeviceRates& rates) {
  double slowest = 0;
  for (int device : task.devices) {
    slowest = std::max(slowest, reshard_spans(graph, task, device, rates, nullptr));
  }
  return slowest;
}

// A compute task's kernel and reshard seconds on `device`.
std::pair<double, double> kernel_and_reshard_seconds(const ir::TaskGraph& graph,
                                                     const ir::Task& task, int device,
                                                     const DeviceRates& rates) {
  std::vector<ReshardSpan> spans;
  const double total = reshard_spans(graph, task, device, rates, &spans);
  double reshards = 0;
  for (const ReshardSpan& span : spans) reshards += span.end - span.start;
  return {total - reshards, reshards};
}

}  // namespace

double op_flops(const ir::OpGraph& graph, const ir::Op& op) {
  if (op.type == "MatMul" || op.type == "Gemm" || op.type == "piper.MatMul") {
    // 2 * (elements of Y) * K.
    const std::optional<ProductShape> product = product_shape(graph, op);
    return product ? 2.0 * elements(graph, op.outputs[0]) * product->k : 0;
  }
  if (op.type == "Einsum") return einsum_flops(graph, op);
  if (op.type == "piper.FusedAttention") return attention_flops(graph, op, 0, false);
  if (op.type == "piper.FusedAttentionGrad") return attention_flops(graph, op, 1, true);
  double largest = 0;
  for (ir::TensorId tensor : op.inputs) largest = std::max(largest, elements(graph, tensor));
  for (ir::TensorId tensor : op.outputs) largest = std::max(largest, elements(graph, tensor));
  return flops_per_element(op.type) * largest;
}

double task_flops(const ir::TaskGraph& graph, const ir::Task& task) {
  const ir::OpGraph& ops = graph.op_graph();
  double total = 0;
  for (ir::OpId op_id : task.ops) {
    const ir::Op& op = ops.op(op_id);
    if (!reshard_kind(op.type)) total += op_flops(ops, op);
  }
  return total;
}

double op_bytes(const ir::OpGraph& graph, const ir::Op& op) {
  double total = 0;
  for (ir::TensorId tensor : op.inputs) total += bytes(graph, tensor);
  for (ir::TensorId tensor : op.outputs) total += bytes(graph, tensor);
  return total;
}

double comm_bytes(const ir::TaskGraph& graph, const ir::Task& task) {
  const ir::OpGraph& ops = graph.op_graph();
  double total = 0;
  if (task.kind == ir::TaskKind::kReduceScatter || task.kind == ir::TaskKind::kAllGather) {
    for (size_t i = 0; i + 1 < task.tensors.size(); i += 2) {
      total += std::max(bytes(ops, task.tensors[i]), bytes(ops, task.tensors[i + 1]));
    }
    return total;
  }
  for (ir::TensorId tensor : task.tensors) total += bytes(ops, tensor);
  return total;
}

double op_seconds(const ir::OpGraph& graph, const ir::Op& op, const DeviceRates& rates) {
  const bool bfloat16 = std::any_of(op.inputs.begin(), op.inputs.end(), [&](ir::TensorId in) {
    return in >= 0 && graph.tensor(in).dtype == ir::DType::kBFloat16;
  });
  const std::string dtype = bfloat16 ? "bfloat16" : "float32";
  // Measured times hold the kernel's whole time, its dispatch included.
  if (const formats::MeasuredProducts* grid = rates.measured.products_in(dtype)) {
    if (const std::optional<ProductShape> product = product_shape(graph, op)) {
      return product->batch *
             grid->product_seconds(product->m, product->n, product->k, product->layout);
    }
  }
  if (const formats::MeasuredKernel* measured = measured_kernel(op, dtype, rates.measured)) {
    return measured->curve.seconds(measured->key == formats::CostKey::kFlops ? op_flops(graph, op)
                                                                             : op_bytes(graph, op));
  }
  return std::max(op_flops(graph, op) / (bfloat16 ? rates.bfloat16_flops : rates.flops),
                  op_bytes(graph, op) / rates.memory_bandwidth) +
         rates.op_overhead;
}

double collective_seconds(ir::TaskKind kind, const std::vector<int>& ranks, double bytes,
                          const DeviceRates& rates) {
  const double n = static_cast<double>(ranks.size());
  double factor = 1;
  switch (kind) {
    case ir::TaskKind::kAllReduce:
      factor = 2 * (n - 1) / n;
      break;
    case ir::TaskKind::kReduceScatter:
    case ir::TaskKind::kAllGather:
    case ir::TaskKind::kAllToAll:
      factor = (n - 1) / n;
      break;
    case ir::TaskKind::kBroadcast:
      factor = n > 1 ? 1 : 0;
      break;
    default:  // send, recv: to or from one peer
      break;
  }
  if (!(factor > 0)) return 0;
  // Curves were measured on one node: groups across nodes take the inter-node link's rates.
  if (rates.within_node(ranks)) {
    if (const formats::MeasuredCollective* measured =
            rates.measured.collective(measured_kind(kind), static_cast<int>(ranks.size()))) {
      return measured->curve.seconds(bytes);
    }
  }
  const formats::Link& link = rates.link(ranks);
  return link.latency + factor * bytes / link.bandwidth;
}

double reshard_spans(const ir::TaskGraph& graph, const ir::Task& task, int device,
                     const DeviceRates& rates, std::vector<ReshardSpan>* spans) {
  const ir::OpGraph& ops = graph.op_graph();
  double time = 0;
  for (ir::OpId op_id : task.ops) {
    const ir::Op& op = ops.op(op_id);
    const std::optional<ir::TaskKind> kind = reshard_kind(op.type);
    if (!kind) {
      time += op_seconds(ops, op, rates);
      continue;
    }
    const double moved = std::max(op.inputs.empty() ? 0.0 : bytes(ops, op.inputs[0]),
                                  op.outputs.empty() ? 0.0 : bytes(ops, op.outputs[0]));
    const double start = time;
    time += reshard_seconds(graph, task, device, op, *kind, moved, rates);
    if (spans != nullptr) spans->push_back({op_id, *kind, start, time});
  }
  return time;
}

double task_seconds(const ir::TaskGraph& graph, ir::TaskId id, const DeviceRates& rates) {
  const ir::Task& task = graph.task(id);
  if (task.kind == ir::TaskKind::kCompute) return compute_seconds(graph, task, rates);
  std::vector<int> devices = task.devices;
  const bool transfer = task.kind == ir::TaskKind::kSend || task.kind == ir::TaskKind::kRecv;
  if (transfer && task.peer >= 0) devices.push_back(task.peer);
  const double bytes = comm_bytes(graph, task);
  double seconds = 0;
  // Each member of the devices' tensor-parallel groups runs its own copy, over its own link.
  for (const std::vector<int>& ranks : member_ranks(graph, devices)) {
    // A transfer's n is 1: its two ranks only pick the link.
    seconds = std::max(seconds, collective_seconds(task.kind, ranks, bytes, rates));
  }
  return seconds;
}

double pair_seconds(const ir::TaskGraph& graph, ir::TaskId a, ir::TaskId b,
                    const DeviceRates& rates) {
  const ir::Task& first = graph.task(a);
  const ir::Task& second = graph.task(b);
  std::vector<int> devices = first.devices;
  devices.insert(devices.end(), second.devices.begin(), second.devices.end());
  double slowest = 0;
  for (int device : devices) {
    const auto [kernels_a, reshards_a] = kernel_and_reshard_seconds(graph, first, device, rates);
    const auto [kernels_b, reshards_b] = kernel_and_reshard_seconds(graph, second, device, rates);
    slowest = std::max(slowest, kernels_a + kernels_b + std::max(0.0, reshards_a - kernels_b) +
                                    std::max(0.0, reshards_b - kernels_a));
  }
  return slowest;
}

}  // namespace piper::planner::sim
